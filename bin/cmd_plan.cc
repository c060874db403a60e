// `libai-actor plan CONFIG [key=value ...] [--svg FILE]`: the pipeline plan of a job config,
// compiled by schedule/ (no stage is run): the stage split and each stage's devices,
// the memory of every device, the predicted timeline of one step as a text chart (and as an
// SVG picture with --svg), the step time, the throughput and the utilisation. Ends with the
// plan's validation: a plan that does not fit (memory) or cannot run (deadlock) exits 1 with
// the reason, after it has been printed.
//
// Real costs, as `libai-actor run` plans (plan/run_plan.h, the same request and compiler):
// when the config is a job `run` runs with known costs (job._target_ generate, encode or serve
// with model.weights, or synthetic), the plan uses the model's per-layer flops and bytes (or
// job.layer_seconds) on the cluster's devices: dp x pp x tp devices on nodes of
// train.cluster.devices_per_node, every node assumed like this machine (cpu:0 measured once
// with train.cluster.device_threads; each device's rates divided by its
// train.cluster.device_slowdown), unless train.cluster.profiles sets a device's fields
// (node<k>:cpu:<d>: {matmul_gflops, memory_bandwidth_gbs, free_memory_bytes, layer_seconds,
// layer_step_seconds}). It prints
// seconds and bytes, and names the device that lacks memory by its name.
//
// A model's training (job._target_ train with model.config or model.weights) is planned as
// `libai-actor train` with graph.enabled true plans it (plan/train_plan.h): per layer the
// model's flops and bytes for a micro-batch of train_micro_batch_size x data.seq_length tokens,
// calibrated by one layer's forward and backward timed on cpu:0 (every node assumed like this
// machine, each device slowed by train.cluster.device_slowdown), weights + gradients + AdamW
// state and the activations the schedule stashes per device, split by train.dist.balance over
// train.cluster.nodes nodes. `--json` prints that plan as JSON.
//
// Otherwise (no model), the what-if plan of plan/what_if.h: layers of one unit on devices that
// train.dist.device_speed and device_memory describe.
//
// The command itself only dispatches and writes files: every plan is built and printed by plan/
// (libai_plan), so this file links into `libai-plan` too, a binary without the actor library.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "plan/auto_parallel.h"
#include "plan/run_job.h"
#include "plan/run_plan.h"
#include "plan/train_plan.h"
#include "plan/what_if.h"
#include "bin/commands.h"
#include "app/schema.h"
#include "runtime/error.h"
#include "schedule/plan.h"
#include "schedule/svg.h"

namespace libai::cli {
namespace {

struct PlanOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string svg;
  int width = 72;
  bool json = false;
};

void write_svg(const PlanOptions& options, const schedule::Plan& plan,
               const schedule::SvgOptions& svg) {
  std::ofstream out(options.svg);
  out << schedule::render_timeline_svg(plan.timeline, plan.pp, svg);
  LIBAI_CHECK_KIND(IoError, out.good(), "cannot write '", options.svg, "'");
  std::printf("timeline written to %s\n", options.svg.c_str());
}

// A job `run` (or `serve`) runs with known costs: a model job with its weights, or synthetic
// stages.
bool has_real_costs(const config::Config& cfg) {
  const std::string target = cfg.get_or<std::string>("job._target_", "train");
  if (target == "synthetic") return true;
  const auto weights = cfg.get_or<std::optional<std::string>>("model.weights", std::nullopt);
  return (target == "generate" || target == "encode" || target == "serve") && weights &&
         !weights->empty();
}

// A real model's training: a model (model.config or model.weights) under job._target_ train.
// Eager training (graph.enabled false) is planned as graph mode would run its layout.
bool is_model_training(const config::Config& cfg) {
  if (cfg.get_or<std::string>("job._target_", "train") != "train") return false;
  const auto weights = cfg.get_or<std::string>("model.weights", "");
  const auto config_file = cfg.get_or<std::string>("model.config", "");
  return !weights.empty() || !config_file.empty();
}

// graph.auto_parallel.enabled (plan/auto_parallel.h): every layout of the cluster's devices
// estimated on devices like this one; the chosen one, the next best and why the others lost,
// then the chosen layout's plan in full.
int plan_auto_parallel(const PlanOptions& options, const config::Config& cfg,
                       const models::HfConfig& hf, const std::string& model_name) {
  const plan::AutoParallelRun run = plan::run_auto_parallel(cfg, hf, model_name);
  const auto& [setup, profiles, costs, result] = run;
  if (options.json) {
    std::cout << plan::auto_parallel_json(setup, result).dump(2) << "\n" << std::flush;
    return result.ranked.empty() ? kExitError : kExitOk;
  }
  std::ostringstream out;
  out << "devices: every node like this one (cpu:0 measured with " << setup.base.threads
      << " thread(s), a layer's forward and backward timed), train.cluster.device_slowdown and "
         "train.cluster.profiles applied\n";
  plan::print_auto_parallel(out, setup, result);
  if (!result.ranked.empty()) {
    const schedule::ParallelChoice& chosen = result.ranked.front().choice;
    schedule::Plan plan;
    schedule::estimate_training(costs, chosen, &plan);
    out << "\nthe chosen layout's plan:\n";
    plan::print_train_plan(out, plan::shape_of(setup, chosen), plan, profiles, options.width);
  }
  std::cout << out.str() << std::flush;
  return result.ranked.empty() ? kExitError : kExitOk;
}

// The training plan `libai-actor train` with graph.enabled true would choose on nodes like
// this one (plan/train_plan.h): train.cluster.nodes nodes sharing the dp x pp x tp slots.
int plan_model_training(const PlanOptions& options, const config::Config& cfg) {
  const auto weights = cfg.get_or<std::string>("model.weights", "");
  const auto config_file = cfg.get_or<std::string>("model.config", "");
  LIBAI_CHECK(weights.empty() != config_file.empty(), options.config,
              ": set one of model.weights and model.config");
  const std::filesystem::path json_path = weights.empty()
                                              ? std::filesystem::path(config_file)
                                              : std::filesystem::path(weights) / "config.json";
  const models::HfConfig hf = models::HfConfig::load(json_path);
  LIBAI_CHECK_KIND(Unsupported, plan::has_train_costs(hf), options.config,
                   ": the planner has no costs for model_type '", hf.model_type(),
                   "' (it has costs for ", plan::families_with_train_costs(), ")");
  if (cfg.get_or<bool>("graph.auto_parallel.enabled", false))
    return plan_auto_parallel(options, cfg, hf, weights.empty() ? config_file : weights);
  const int dp = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  const int tp = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  const int pp = cfg.get_or<int>("train.dist.pipeline_parallel_size", 1);
  const int nodes = cfg.get_or<int>("train.cluster.nodes", 1);
  LIBAI_CHECK(nodes >= 1 && (dp * tp * pp) % nodes == 0, options.config, ": train.dist: ", dp,
              " x ", tp, " x ", pp, " = ", dp * tp * pp, " slots do not divide over ", nodes,
              " nodes (train.cluster.nodes)");
  const plan::ModelTrainShape shape = plan::model_train_shape(
      cfg, hf, weights.empty() ? config_file : weights, dp * tp * pp / nodes);
  const schedule::PlanRequest request = plan::train_plan_request(
      shape, std::vector<DeviceProfile>(size_t(dp * tp * pp), {.name = "?",
                                                                      .matmul_gflops = 1,
                                                                      .memory_bandwidth_gbs = 1}));
  plan::check_train_schedule(request, cfg, options.config);  // named by key before measuring anything
  const std::vector<DeviceProfile> profiles = plan::train_devices_like_this_node(cfg, shape);
  const schedule::Plan plan = plan::compile_train_plan(shape, profiles);
  if (options.json) {
    std::cout << plan::train_plan_json(shape, plan, profiles).dump(2) << "\n" << std::flush;
  } else {
    std::ostringstream out;
    if (!cfg.get_or<bool>("graph.enabled", false))
      out << "graph.enabled is false: `libai-actor train` trains this config eagerly in one "
             "process; below is the plan of its layout in graph mode (graph.enabled=true)\n";
    out << "devices: every node like this one (cpu:0 measured with " << shape.threads
        << " thread(s), a layer's forward and backward timed), train.cluster.device_slowdown and "
           "train.cluster.profiles applied\n";
    plan::print_train_plan(out, shape, plan, profiles, options.width);
    std::cout << out.str() << std::flush;
  }
  if (!options.svg.empty())
    write_svg(options, plan, {.title = "libai-actor plan " + options.config});
  std::fflush(stdout);
  plan::check_train_plan(plan, profiles, shape.devices_per_node);  // after it has been shown
  return kExitOk;
}

// The plan `run` would choose on a cluster of nodes like this one (see the top of the file).
int plan_job(const PlanOptions& options, const config::Config& cfg) {
  const int dp = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  const int tp = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  const int pp = cfg.get_or<int>("train.dist.pipeline_parallel_size", 1);
  const int per_node = cfg.get_or<int>("train.cluster.devices_per_node", 1);
  // Auto parallel: the cluster's devices, the layout searched (as node 0 of `run` does).
  const bool search = cfg.get_or<bool>("graph.auto_parallel.enabled", false);
  const int devices = search ? cfg.get_or<int>("train.cluster.nodes", 1) * per_node : dp * pp * tp;
  LIBAI_CHECK(devices % per_node == 0, options.config, ": data ", dp, " x pipeline ", pp,
              " x tensor ", tp, " = ", devices,
              " devices do not fill whole nodes of train.cluster.devices_per_node ", per_node);
  plan::RunJob job(cfg, devices / per_node);
  const std::vector<DeviceProfile> profiles = job.devices_like_this_node();
  std::ostringstream out;
  out << "devices: every node like this one (cpu:0 measured with "
      << cfg.get_or<int>("train.cluster.device_threads", 1)
      << " thread(s)), train.cluster.device_slowdown and train.cluster.profiles applied\n";
  if (search) out << job.search_layout(profiles, 0, 0);
  plan::JobShape shape = job.shape();
  plan::resolve_stage_precision(shape, profiles);  // train.dist.stage_precision auto
  const schedule::Plan plan = plan::compile_job_plan(shape, profiles);
  plan::print_job_plan(out, shape, plan, profiles, options.width);
  std::cout << out.str() << std::flush;
  if (!options.svg.empty())
    write_svg(options, plan, {.title = "libai-actor plan " + options.config});
  std::fflush(stdout);
  plan::check_job_plan(plan, profiles, per_node);  // after the plan has been shown
  return kExitOk;
}

int plan(const PlanOptions& options) {
  const config::Config cfg = config::load_libai_config(options.config, options.overrides, {});
  if (is_model_training(cfg)) return plan_model_training(options, cfg);
  LIBAI_CHECK(!options.json, options.config,
              ": --json is implemented for the training plans of models (model.config or "
              "model.weights under job._target_ train) only");
  if (has_real_costs(cfg)) return plan_job(options, cfg);  // ConfigJob checks it as a run job
  const plan::WhatIfPlan what_if = plan::plan_what_if(cfg, options.config, options.width);
  std::cout << what_if.text << std::flush;
  const schedule::Plan& plan = what_if.plan;
  if (!options.svg.empty())
    write_svg(options, plan,
              {.title = "libai-actor plan " + options.config, .time_scale = 1.0, .time_unit = "units"});
  std::fflush(stdout);
  schedule::validate(plan);  // throws, after the plan has been shown, when it cannot run
  return kExitOk;
}

}  // namespace

CommandAction setup_plan(CLI::App& command) {
  auto options = std::make_shared<PlanOptions>();
  command.add_option("CONFIG", options->config, "job config (YAML)")->required();
  command.add_option("overrides", options->overrides,
                     "KEY=VALUE overrides, e.g. train.dist.pipeline_parallel_size=4");
  command.add_option("--width", options->width, "columns of the timeline chart")
      ->check(CLI::Range(20, 400));
  command.add_option("--svg", options->svg, "also write the timeline as an SVG picture");
  command.add_flag("--json", options->json,
                   "print the plan as JSON (training plans of models: model.config or "
                   "model.weights under job._target_ train)");
  return [options] { return plan(*options); };
}

}  // namespace libai::cli
