// `libai-actor run CONFIG [key=value ...] [--nodes N --node-rank R --addr A --port P --token T]`:
// runs the job config on this node; run it on every node with the same config. Node 0 prints
// the plan, the results and what each stage did. The cluster comes from the flags, else the
// launcher's environment (LiBai's NODE, NODE_RANK, ADDR, PORT; torchrun's; Slurm's), else
// train.cluster.* (runtime/cluster_env.h); the token from --token, LIBAI_CLUSTER_TOKEN or
// train.cluster.token.
//
//   Node 0 plans the job as `libai-actor plan` does (plan/run_plan.h), from the devices' measured
//   profiles, and prints the plan (split, devices, memory, predicted timeline) before the results.
//   --json: node 0 prints one JSON document: the results ("sequences" as `generate --json`
//   prints them, or "embeddings"), "plan" (stage_of: the split; device_of_stage: each stage's
//   pipeline slot; stage_devices: their names; stage_seconds: each stage's seconds per action
//   (decoding: per step after the first); stage_memory_bytes: per device of each stage;
//   predicted_seconds, predicted_utilisation, predicted_throughput: items per second;
//   weights: model.quantize, "none" for f32),
//   A training job (synthetic_train) adds to "plan": workload "train", schedule,
//   stage_backward_seconds, transfer_seconds and predicted_step_seconds (one step;
//   predicted_seconds is job.steps of them), and to "train": measured_step_seconds (Note
//   [Training predictions]).
//   "job_seconds" (measured: from the start until the last output was in), "finish_seconds"
//   (until every stage had reported, after the groups' done packets), "stages" (each stage's
//   actions, busy seconds, utilisation over job_seconds).
//   --svg FILE: node 0 writes the predicted timeline as an SVG.
#include <cstdio>
#include <iostream>
#include <sstream>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "actors/jobs/config_job.h"
#include "actors/jobs/prediction.h"
#include "schedule/svg.h"
#include "bin/commands.h"
#include "ops/packed_linear.h"
#include "app/schema.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::cli {
namespace {

struct RunOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::optional<int> nodes, node_rank, port;
  std::optional<std::string> addr, token;
  bool json = false;
  std::string svg;
};

// Note [Training predictions]
// A training job's plan predicts ONE step of its schedule (schedule::simulate of the stages'
// forward and backward seconds, the measured hop as transfer): it is compared with the median
// measured step, the first left out when there are more (it pays for the first packets'
// connections and the threads' first wake-ups).
double measured_step_seconds(const actors::ConfigJob& job) {
  const auto& steps = job.train_results();
  std::vector<double> times;
  for (size_t k = steps.size() > 1 ? 1 : 0; k < steps.size(); ++k) times.push_back(steps[k].seconds);
  if (times.empty()) return 0;
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

int run(const RunOptions& options) {
  const config::Config cfg = config::load_libai_config(options.config, options.overrides, {});
  ClusterFlags flags;
  flags.nodes = options.nodes;
  flags.node_rank = options.node_rank;
  flags.port = options.port;
  flags.addr = options.addr;
  flags.token = options.token;
  const ClusterSpec spec = resolve_cluster(flags, &cfg);
  set_log_rank(spec.node_rank);
  actors::ConfigJob job(cfg, spec.nodes);
  LIBAI_CHECK(!job.serving(), options.config, ": job._target_ is serve: run it with `libai-actor serve ",
              options.config, "` on every node");
  actors::install_interrupt_handlers();
  actors::ClusterOptions cluster = actors::cluster_options(cfg);
  logger("cluster")->info("node {} of {} (cluster from {})", spec.node_rank, spec.nodes,
                          spec.source);
  actors::ClusterResult result;
  try {
    result = actors::run_cluster(spec, job, cluster);
  } catch (const Error& e) {
    // Stage threads of this node may still be tied to a dead peer: end the process now.
    std::fprintf(stderr, "libai-actor run: error: %s\n", e.what());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(kExitError);
  }
  if (spec.node_rank != 0) {
    std::printf("node %d: done (%zu stage(s))\n", spec.node_rank, result.reports.size());
    return kExitOk;
  }
  std::sort(result.reports.begin(), result.reports.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  const schedule::Timeline predicted = actors::predict_job(job, result.assignment);
  const int pp = job.pipeline_parallel_size();
  // A training plan's timeline is one step; the job runs train_results().size() of them.
  const double predicted_job =
      predicted.step_time * (job.training() ? double(job.train_results().size()) : 1.0);
  if (!options.svg.empty()) {
    std::ofstream(options.svg) << schedule::render_timeline_svg(
        predicted, pp, {.title = "predicted timeline of " + options.config});
  }
  std::ostringstream out;
  if (options.json) {
    std::ostringstream results;
    job.print_results(results, true);
    nlohmann::json doc = results.str().empty() ? nlohmann::json::object()
                                               : nlohmann::json::parse(results.str());
    const schedule::Plan& plan = job.chosen_plan();
    nlohmann::json stage_devices = nlohmann::json::array(), seconds = nlohmann::json::array(),
                   memory = nlohmann::json::array();
    for (const schedule::StagePlan& st : plan.stages) {
      nlohmann::json names = nlohmann::json::array();
      for (int d : st.devices) names.push_back(result.assignment.devices[size_t(d)].name);
      stage_devices.push_back(names);
      seconds.push_back(plan.workload == schedule::Workload::decode ? st.decode_time
                                                                    : st.forward_time);
      memory.push_back(st.memory());
    }
    doc["plan"] = {{"stage_of", result.assignment.stage_of},
                   {"device_of_stage", result.assignment.device_of_stage},
                   {"stage_devices", stage_devices},
                   {"stage_seconds", seconds},
                   {"stage_memory_bytes", memory},
                   {"predicted_seconds", predicted_job},
                   {"predicted_utilisation", predicted.utilisation},
                   {"predicted_throughput", plan.throughput}};
    doc["plan"]["workload"] = schedule::workload_name(plan.workload);
    const plan::JobShape shape = job.shape();
    if (shape.mixed_precision()) {  // train.dist.stage_precision
      nlohmann::json precisions = nlohmann::json::array();
      for (const schedule::StagePlan& st : plan.stages)
        precisions.push_back(plan::stage_precision_name(shape, st));
      doc["plan"]["weights"] = "per stage";
      doc["plan"]["stage_precision"] = precisions;
    } else {
      doc["plan"]["weights"] = ops::quantization_name(shape.quantize);  // model.quantize
    }
    if (job.training()) {
      // Note [Training predictions]: the plan predicts one step of the training schedule.
      doc["plan"]["schedule"] = schedule::schedule_name(plan.schedule);
      doc["plan"]["stage_backward_seconds"] = plan.costs.backward;
      doc["plan"]["transfer_seconds"] = plan.costs.transfer;
      doc["plan"]["predicted_step_seconds"] = predicted.step_time;
      doc["train"]["measured_step_seconds"] = measured_step_seconds(job);
    }
    doc["job_seconds"] = result.job_seconds;
    doc["finish_seconds"] = result.finish_seconds;
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& r : result.reports)
      stages.push_back({{"name", r.name},
                        {"node", r.node},
                        {"actions", r.actions},
                        {"busy_seconds", r.busy_seconds},
                        {"bytes_received", r.bytes_received},
                        {"utilisation", r.busy_seconds / std::max(1e-9, result.job_seconds)}});
    doc["stages"] = stages;
    out << doc.dump(2) << "\n";
  } else {
    job.print_plan(out, result.assignment);
    out << "\n";
    job.print_results(out, false);
    char line[200];
    if (job.training()) {
      const double measured = measured_step_seconds(job);
      std::snprintf(line, sizeof line,
                    "\nstep: %.4f s measured (median%s), %.4f s predicted (%+.1f%%)",
                    measured, job.train_results().size() > 1 ? " after the first" : "",
                    predicted.step_time,
                    100.0 * (predicted.step_time - measured) / std::max(1e-9, measured));
      out << line;
    }
    std::snprintf(line, sizeof line,
                  "\njob: %.3f s measured, %.3f s predicted (%+.1f%%); stages finished at %.3f s\n",
                  result.job_seconds, predicted_job,
                  100.0 * (predicted_job - result.job_seconds) / std::max(1e-9, result.job_seconds),
                  result.finish_seconds);
    out << line << "stages:\n";
    for (const auto& r : result.reports) {
      std::snprintf(line, sizeof line,
                    "  %-24s node %d  %4llu actions  busy %7.3f s  utilisation %5.1f%%\n",
                    r.name.c_str(), r.node, static_cast<unsigned long long>(r.actions),
                    r.busy_seconds, 100.0 * r.busy_seconds / std::max(1e-9, result.job_seconds));
      out << line;
    }
  }
  std::cout << out.str() << std::flush;
  return kExitOk;
}

}  // namespace

CommandAction setup_run(CLI::App& command) {
  auto options = std::make_shared<RunOptions>();
  command.add_option("CONFIG", options->config, "job config (YAML)")->required();
  command.add_option("overrides", options->overrides, "KEY=VALUE overrides");
  command.add_option("--nodes", options->nodes, "number of nodes (overrides NODE / NNODES)");
  command.add_option("--node-rank", options->node_rank, "this node's rank (overrides NODE_RANK)");
  command.add_option("--addr", options->addr, "node 0's address (overrides ADDR / MASTER_ADDR)");
  command.add_option("--port", options->port, "node 0's port (overrides PORT / MASTER_PORT)");
  command.add_option("--token", options->token, "the cluster token (overrides LIBAI_CLUSTER_TOKEN)");
  command.add_flag("--json", options->json, "node 0 prints one JSON document");
  command.add_option("--svg", options->svg, "node 0 writes the predicted timeline as an SVG");
  return [options] { return run(*options); };
}

}  // namespace libai::cli
