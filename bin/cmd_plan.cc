// `libai-actor plan CONFIG [key=value ...] [--svg FILE]`: the pipeline plan of a job config,
// compiled by schedule/ (no stage is run): the stage split and each stage's devices,
// the memory of every device, the predicted timeline of one step as a text chart (and as an
// SVG picture with --svg), the step time, the throughput and the utilisation. Ends with the
// plan's validation: a plan that does not fit (memory) or cannot run (deadlock) exits 1 with
// the reason, after it has been printed.
//
// What is planned follows `job._target_`: `train` runs `train.dist.pipeline_schedule` (gpipe,
// 1f1b or interleaved over `train.dist.virtual_pipeline_size` chunks per stage) over
// `train.num_accumulation_steps` micro-batches of `train.train_micro_batch_size` samples, and
// shows the predicted bubble beside the ideal formula and the activations the schedule stashes;
// `generate` decodes `job.num_groups` groups (default: one per stage) of `job.group_size` sequences
// (default 1) for `job.max_new_tokens` steps (default 32); any other target runs one forward over
// `job.num_micro_batches` micro-batches (default: one per stage) of `job.micro_batch_size`.
//
// Real costs, as `libai-actor run` plans (plan/run_plan.h, the same request and compiler):
// when the config is a job `run` runs with known costs (job._target_ generate or encode with
// model.weights, or synthetic), the plan uses the model's per-layer flops and bytes (or
// job.layer_seconds) on the cluster's devices: dp x pp x tp devices on nodes of
// train.cluster.devices_per_node, every node assumed like this machine (cpu:0 measured once
// with train.cluster.device_threads; each device's rates divided by its
// train.cluster.device_slowdown), unless train.cluster.profiles sets a device's fields
// (node<k>:cpu:<d>: {matmul_gflops, memory_bandwidth_gbs, free_memory_bytes, layer_seconds,
// layer_step_seconds}). It prints
// seconds and bytes, and names the device that lacks memory by its name.
//
// A model's training (job._target_ train with model.config or model.weights and graph.enabled
// true) is planned as `libai-actor train` plans it (plan/train_plan.h): per layer the
// model's flops and bytes for a micro-batch of train_micro_batch_size x data.seq_length tokens,
// calibrated by one layer's forward and backward timed on cpu:0 (every node assumed like this
// machine, each device slowed by train.cluster.device_slowdown), weights + gradients + AdamW
// state and the activations the schedule stashes per device, split by train.dist.balance over
// train.cluster.nodes nodes. `--json` prints that plan as JSON.
//
// Otherwise (no model), every layer costs one unit of forward time (two of backward; a
// decoding step as much as the prefill) on a device of speed 1, and what-if keys under
// `train.dist` describe the devices and the model: `device_speed` (relative speed, per device
// or per stage), `device_memory` (GiB, per device or per stage), `layer_memory` (GiB each layer
// holds) and `activation_memory` (GiB per layer for each micro-batch in flight; for
// `generate`, each group's KV cache).
//
// Training with `train.zero_optimization` enabled costs each rank's model state by ZeRO's memory
// model at its `stage` over the data-parallel replicas (Note [ZeRO memory model] in
// schedule/zero_memory.h) and prints its terms per rank. Without a model, `layer_memory` is then
// read as the layer's model state without ZeRO (f32 weights, gradients and AdamW's moments: 16
// bytes a parameter), so a layer has layer_memory / 16 parameters and is one unit.
#include <cmath>
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
#include "bin/commands.h"
#include "app/schema.h"
#include "runtime/config/unimplemented.h"
#include "runtime/error.h"
#include "schedule/plan.h"
#include "schedule/svg.h"

namespace libai::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct PlanOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string svg;
  int width = 72;
  bool json = false;
};

// A per-device list given per device or per stage (each stage's value for all its devices).
std::vector<double> per_device(const std::string& key, std::vector<double> values, int dp, int pp,
                               int tp, const std::string& file) {
  const int devices = dp * pp * tp;
  if (int(values.size()) == devices) return values;
  LIBAI_CHECK(int(values.size()) == pp, file, ": ", key, " has ", values.size(),
              " entries; expected one per device (", devices, ") or one per stage (", pp, ")");
  std::vector<double> out = std::vector<double>(size_t(devices));
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < pp; ++s)
      for (int t = 0; t < tp; ++t) out[size_t((d * pp + s) * tp + t)] = values[size_t(s)];
  return out;
}

std::string device_list(const std::vector<int>& devices) {
  std::string out = devices.size() == 1 ? "device " : "devices ";
  for (size_t i = 0; i < devices.size() && i < 8; ++i)
    out += (i ? "," : "") + std::to_string(devices[i]);
  if (devices.size() > 8) out += ",... (" + std::to_string(devices.size()) + ")";
  return out;
}

void write_svg(const PlanOptions& options, const schedule::Plan& plan,
               const schedule::SvgOptions& svg) {
  std::ofstream out(options.svg);
  out << schedule::render_timeline_svg(plan.timeline, plan.pp, svg);
  LIBAI_CHECK_KIND(IoError, out.good(), "cannot write '", options.svg, "'");
  std::printf("timeline written to %s\n", options.svg.c_str());
}

// "GPipe", "1F1B", "interleaved 1F1B, 2 chunks per stage".
std::string schedule_title(const schedule::Plan& plan) {
  switch (plan.schedule) {
    case schedule::PipelineSchedule::gpipe: return "GPipe";
    case schedule::PipelineSchedule::one_f_one_b: return "1F1B";
    case schedule::PipelineSchedule::interleaved:
      return "interleaved 1F1B, " + std::to_string(plan.num_chunks) + " chunk" +
             (plan.num_chunks == 1 ? "" : "s") + " per stage";
  }
  return "?";
}

// Cross-key rules of train.dist.pipeline_schedule, named by key before the planner sees them.
void check_schedule(const schedule::PlanRequest& r, const config::Config& cfg,
                    const std::string& file) {
  const bool interleaved = r.schedule == schedule::PipelineSchedule::interleaved;
  LIBAI_CHECK(r.num_chunks == 1 || interleaved, file, ": train.dist.virtual_pipeline_size is ",
              r.num_chunks, " but train.dist.pipeline_schedule is ", schedule_name(r.schedule),
              ": several model chunks per stage need the interleaved schedule");
  if (!interleaved || r.num_chunks == 1) return;
  LIBAI_CHECK(r.num_micro_batches % r.pp == 0, file, ": train.num_accumulation_steps is ",
              r.num_micro_batches, ", not a multiple of train.dist.pipeline_parallel_size ", r.pp,
              ": the interleaved schedule runs micro-batches in groups of one per stage");
  LIBAI_CHECK(r.balance == schedule::Balance::uniform, file, ": train.dist.balance is ",
              cfg.has("train.dist.custom_pipeline_stage_id") &&
                      !cfg.node("train.dist.custom_pipeline_stage_id").is_null()
                  ? std::string("custom (train.dist.custom_pipeline_stage_id)")
                  : cfg.get_or<std::string>("train.dist.balance", "uniform"),
              " but the interleaved schedule splits layers uniformly over its ",
              r.pp * r.num_chunks, " virtual stages (other splits are not implemented yet)");
}

// How many micro-batches (chunks, when interleaved) each stage keeps for its backward at once.
void print_stash(const schedule::Plan& plan) {
  const std::vector<int> stash = schedule::peak_stashed_activations(plan.program);
  std::printf("\npeak stashed activations (%s per stage, %s):",
              plan.num_chunks > 1 ? "micro-batch chunks" : "micro-batches",
              schedule_title(plan).c_str());
  for (size_t s = 0; s < stash.size(); ++s) std::printf(" %d", stash[s]);
  std::printf("\n");
}

// The predicted bubble beside the formula for equal stages and free transfers.
void print_bubble(const schedule::Plan& plan, int m) {
  const int p = plan.pp, v = plan.num_chunks;
  const double predicted = schedule::measured_bubble_fraction(plan.timeline);
  if (v > 1)
    std::printf(
        "bubble %.1f%% of the step (ideal (p-1)/(v m+p-1) = %d/%d = %.1f%%; Megatron's "
        "(p-1)/(v m) = %.1f%% of the ideal time)\n",
        100.0 * predicted, p - 1, v * m + p - 1, 100.0 * schedule::ideal_bubble_fraction(p, m, v),
        100.0 * schedule::megatron_bubble_ratio(p, m, v));
  else
    std::printf("bubble %.1f%% of the step (ideal (p-1)/(m+p-1) = %d/%d = %.1f%%)\n",
                100.0 * predicted, p - 1, m + p - 1, 100.0 * schedule::ideal_bubble_fraction(p, m));
}

// Training under ZeRO: each rank's model state by term (Note [ZeRO memory model]), a layer of
// `layer_gib` being one unit.
void print_zero_memory(const schedule::Plan& plan, double layer_gib) {
  std::printf(
      "\nmemory per rank (train.dist.layer_memory %g GiB a layer read as f32 params, grads and "
      "AdamW state, 16 bytes a parameter; %s; the activations the schedule stashes at its "
      "peak):\n",
      layer_gib, schedule::zero_description(plan.zero_stage, plan.dp).c_str());
  if (plan.dp == 1)
    std::printf("  (ZeRO over one data-parallel rank: it holds every shard, so ZeRO saves "
                "nothing)\n");
  for (int s = 0; s < plan.pp; ++s) {
    const schedule::StagePlan& st = plan.stages[size_t(s)];
    const schedule::RankMemory& m = plan.rank_memory[size_t(s)];
    const schedule::ZeroMemory& z = m.model_state;
    double cap = 0;  // the tightest of its devices
    for (int d : st.devices) {
      const double c = plan.memory_cap[size_t(d)];
      if (c > 0 && (cap <= 0 || c < cap)) cap = c;
    }
    const auto bytes = [](double b) { return schedule::format_bytes(b); };
    std::printf(
        "  %s (stage %d): %s = params %s + grads %s + optimizer %s + in flight %s + activations "
        "%s (%s)%s of %s%s\n",
        device_list(st.devices).c_str(), s, bytes(m.total()).c_str(),
        bytes(z.parameters).c_str(), bytes(z.gradients).c_str(), bytes(z.optimizer).c_str(),
        bytes(z.in_flight).c_str(), bytes(m.activation_bytes).c_str(),
        schedule::zero_description(plan.zero_stage, plan.dp).c_str(),
        st.devices.size() > 1 ? " each" : "", cap > 0 ? bytes(cap).c_str() : "unlimited",
        cap > 0 && m.total() > cap ? "  DOES NOT FIT" : "");
  }
}

// A job `run` runs with known costs: a model job with its weights, or synthetic stages.
bool has_real_costs(const config::Config& cfg) {
  const std::string target = cfg.get_or<std::string>("job._target_", "train");
  if (target == "synthetic") return true;
  const auto weights = cfg.get_or<std::optional<std::string>>("model.weights", std::nullopt);
  return (target == "generate" || target == "encode") && weights && !weights->empty();
}

// A real model's training in graph mode: a model (model.config or model.weights) and
// graph.enabled true under job._target_ train.
bool is_model_training(const config::Config& cfg) {
  if (cfg.get_or<std::string>("job._target_", "train") != "train") return false;
  if (!cfg.get_or<bool>("graph.enabled", false)) return false;
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
                   "' (gpt2, bert, roberta, t5, mt5)");
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
  check_schedule(request, cfg, options.config);  // named by key before measuring anything
  const std::vector<DeviceProfile> profiles = plan::train_devices_like_this_node(cfg, shape);
  const schedule::Plan plan = plan::compile_train_plan(shape, profiles);
  if (options.json) {
    std::cout << plan::train_plan_json(shape, plan, profiles).dump(2) << "\n" << std::flush;
  } else {
    std::ostringstream out;
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
              "model.weights, graph.enabled true) only");
  if (has_real_costs(cfg)) return plan_job(options, cfg);  // ConfigJob checks it as a run job
  config::check_implemented(cfg, config::Purpose::what_if_plan);
  const std::string& file = options.config;
  const int pp = cfg.get<int>("train.dist.pipeline_parallel_size");
  const int dp = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  const int tp = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  const auto layers_opt =
      cfg.get_or<std::optional<int>>("train.dist.pipeline_num_layers", std::nullopt);
  LIBAI_CHECK(
      layers_opt.has_value(), file,
      ": train.dist.pipeline_num_layers is null; planning needs the layer count (set it, or "
      "model.weights for a generate or encode job)");
  const int layers = *layers_opt;
  const int devices = dp * pp * tp;
  const std::vector<double> speed =
      per_device("train.dist.device_speed",
                 cfg.get_or<std::vector<double>>("train.dist.device_speed",
                                                 std::vector<double>(size_t(pp), 1.0)),
                 dp, pp, tp, file);
  const std::vector<double> memory_gib =
      per_device("train.dist.device_memory",
                 cfg.get_or<std::vector<double>>("train.dist.device_memory",
                                                 std::vector<double>(size_t(pp), 0.0)),
                 dp, pp, tp, file);
  const double layer_gib = cfg.get_or<double>("train.dist.layer_memory", 0.0);
  const double activation_gib = cfg.get_or<double>("train.dist.activation_memory", 0.0);

  schedule::PlanRequest request;
  request.dp = dp;
  request.pp = pp;
  request.tp = tp;
  for (int d = 0; d < devices; ++d) {
    request.layer_time.push_back(std::vector<double>(size_t(layers), 1.0 / speed[size_t(d)]));
    request.memory_cap.push_back(memory_gib[size_t(d)] * kGiB);
  }
  request.weight_bytes.assign(size_t(layers), layer_gib * kGiB);
  const std::string target = cfg.get_or<std::string>("job._target_", "train");
  // Note [ZeRO memory model]: layer_memory is a layer's model state without ZeRO, 16 bytes a
  // parameter (unimplemented.cc refuses ZeRO for plans of inference).
  const int zero_stage = cfg.get_or<bool>("train.zero_optimization.enabled", false)
                             ? cfg.get_or<int>("train.zero_optimization.stage", 1)
                             : 0;
  if (zero_stage > 0 && layer_gib > 0) {
    request.zero_stage = zero_stage;
    request.layer_parameters.assign(size_t(layers), layer_gib * kGiB / 16);
    request.weight_bytes.assign(size_t(layers), 0.0);
  }
  std::string unit_name, item_name;
  if (target == "train") {
    request.workload = schedule::Workload::train;
    request.num_micro_batches = std::max(1, cfg.get_or<int>("train.num_accumulation_steps", 1));
    request.items_per_micro_batch = cfg.get_or<int>("train.train_micro_batch_size", 1);
    request.activation_bytes.assign(size_t(layers), activation_gib * kGiB);
    request.schedule =
        schedule::parse_schedule(cfg.get_or<std::string>("train.dist.pipeline_schedule", "1f1b"));
    request.num_chunks = cfg.get_or<int>("train.dist.virtual_pipeline_size", 1);
    check_schedule(request, cfg, file);
    unit_name = "micro-batch";
    item_name = "samples";
  } else if (target == "generate") {
    request.workload = schedule::Workload::decode;
    request.num_micro_batches = cfg.get_or<int>("job.num_groups", pp);
    request.num_steps = cfg.get_or<int>("job.max_new_tokens", 32);
    request.items_per_micro_batch = cfg.get_or<int>("job.group_size", 1);
    request.kv_cache_bytes.assign(size_t(layers), activation_gib * kGiB);
    unit_name = "step of a group";
    item_name = "tokens";
  } else {
    request.workload = schedule::Workload::inference;
    request.num_micro_batches = cfg.get_or<int>("job.num_micro_batches", pp);
    request.items_per_micro_batch = cfg.get_or<int>("job.micro_batch_size", 1);
    unit_name = "micro-batch";
    item_name = "sequences";
  }
  const std::string balance = cfg.get_or<std::string>("train.dist.balance", "uniform");
  if (auto custom = cfg.get_or<std::optional<std::vector<int64_t>>>(
          "train.dist.custom_pipeline_stage_id", std::nullopt)) {
    request.balance = schedule::Balance::custom;
    request.custom_stage_ids = *custom;
  } else if (balance == "measured") {
    request.balance = schedule::Balance::balanced;
  } else if (balance == "memory") {
    LIBAI_CHECK(
        cfg.has("train.dist.device_memory") && !cfg.node("train.dist.device_memory").is_null(),
        file, ": train.dist.balance is memory but train.dist.device_memory is null");
    request.balance = schedule::Balance::memory;
  }
  const schedule::Plan plan = schedule::compile_plan(request);
  const int m = request.num_micro_batches;
  const bool train = plan.workload == schedule::Workload::train;

  // The split.
  if (plan.workload == schedule::Workload::decode)
    std::printf("plan: %d layers, %d stages, %d groups x %d steps (decoding), balance %s\n", layers,
                pp, m, request.num_steps, balance.c_str());
  else
    std::printf("plan: %d layers, %d stages, %d micro-batches (%s), balance %s\n", layers, pp, m,
                train ? schedule_title(plan).c_str() : "inference", balance.c_str());
  if (dp > 1 || tp > 1)
    std::printf("  %d devices: %d data-parallel replicas x %d stages x %d tensor-parallel ranks\n",
                devices, dp, pp, tp);
  for (int s = 0; s < int(plan.stages.size()); ++s) {
    const schedule::StagePlan& st = plan.stages[size_t(s)];
    double slowest = speed[size_t(st.devices[0])];
    for (int d : st.devices) slowest = std::min(slowest, speed[size_t(d)]);
    const std::string name =
        plan.num_chunks > 1 ? "stage " + std::to_string(s % pp) + " chunk " + std::to_string(s / pp)
                            : "stage " + std::to_string(s);
    std::printf(
        "  %s: layers %d-%d (%d), %s (speed %.2f), %.2f units per %s, %d input "
        "slot%s\n",
        name.c_str(), st.first_layer, st.last_layer, st.num_layers(),
        device_list(st.devices).c_str(), slowest,
        plan.workload == schedule::Workload::decode ? st.decode_time : st.forward_time,
        unit_name.c_str(), st.input_slots, st.input_slots == 1 ? "" : "s");
  }

  // Memory.
  if (train) print_stash(plan);
  if (zero_stage > 0 && layer_gib > 0) {
    print_zero_memory(plan, layer_gib);
  } else if (layer_gib > 0 || activation_gib > 0) {
    std::printf("\nmemory per device (weights + %s):\n",
                plan.workload == schedule::Workload::decode ? "kv cache"
                : train ? "the activations the schedule stashes at its peak"
                        : "activations");
    for (int s = 0; s < pp; ++s) {
      const schedule::StagePlan& st = plan.stages[size_t(s)];
      const schedule::RankMemory& memory = plan.rank_memory[size_t(s)];
      double cap = 0;  // the tightest of its devices
      for (int d : st.devices) {
        const double c = plan.memory_cap[size_t(d)];
        if (c > 0 && (cap <= 0 || c < cap)) cap = c;
      }
      std::printf("  %s (stage %d): %s (%s + %s)%s of %s%s\n", device_list(st.devices).c_str(), s,
                  schedule::format_bytes(memory.total()).c_str(),
                  schedule::format_bytes(memory.weight_bytes).c_str(),
                  schedule::format_bytes(memory.kv_cache_bytes + memory.activation_bytes).c_str(),
                  st.devices.size() > 1 ? " each" : "",
                  cap > 0 ? schedule::format_bytes(cap).c_str() : "unlimited",
                  cap > 0 && memory.total() > cap ? "  DOES NOT FIT" : "");
    }
  } else {
    std::printf(
        "\nmemory per device: not modelled (set train.dist.layer_memory and "
        "train.dist.activation_memory, in GiB)\n");
  }
  if (zero_stage > 0 && layer_gib <= 0)
    std::printf("ZeRO-%d: no model state to shard (train.dist.layer_memory is not set)\n",
                zero_stage);

  // The timeline.
  const char* legend =
      train
          ? (plan.num_chunks > 1 ? "digits: forward of micro-batch k, letters: backward, any chunk"
                                 : "digits: forward of micro-batch k, letters: backward")
      : plan.workload == schedule::Workload::decode ? "digits: group k, any step"
                                                    : "digits: forward of micro-batch k";
  std::printf("\npredicted timeline of one step (%s):\n%s", legend,
              schedule::render_timeline(plan.timeline, pp, options.width).c_str());
  double work_per_replica = double(layers) * m;
  if (plan.workload == schedule::Workload::train) work_per_replica *= 1 + request.backward_factor;
  if (plan.workload == schedule::Workload::decode) work_per_replica *= request.num_steps;
  double total_speed = 0;
  for (double v : speed) total_speed += v;
  const double ideal = work_per_replica * dp / total_speed;
  const double step = plan.timeline.step_time;
  std::printf("\nstep time %.2f units (ideal %.2f: %.0f%% of the devices' combined speed)\n", step,
              ideal, step > 0 ? 100.0 * ideal / step : 0.0);
  std::printf("throughput %.3f %s per unit (%g per step), mean utilisation %.0f%%\n",
              plan.throughput, item_name.c_str(), plan.items_per_step, 100.0 * plan.utilisation);
  if (train) print_bubble(plan, m);

  if (!options.svg.empty())
    write_svg(options, plan,
              {.title = "libai-actor plan " + file, .time_scale = 1.0, .time_unit = "units"});
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
                   "model.weights with graph.enabled true)");
  return [options] { return plan(*options); };
}

}  // namespace libai::cli
