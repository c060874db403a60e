// `libai-actor plan CONFIG [key=value ...]`: the pipeline plan of a job config, computed by
// schedule/ alone (no devices touched): the stage split, the predicted 1F1B timeline of one
// step as a text chart, the step time and each stage's utilisation.
//
// Until models report per-layer costs and nodes report measured profiles, every layer costs
// one unit of forward time (two of backward) on a device of speed 1; `train.dist.device_speed`
// gives each stage's relative speed for what-if planning on mixed hardware.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bin/commands.h"
#include "runtime/config/libai_schema.h"
#include "schedule/partition.h"
#include "schedule/program.h"

namespace libai::cli {
namespace {

struct PlanOptions {
  std::string config;
  std::vector<std::string> overrides;
  int width = 72;
};

schedule::StageAssignment choose_split(const config::Config& cfg, const schedule::CostModel& cost,
                                       int layers, int stages) {
  if (auto custom = cfg.get_or<std::optional<std::vector<int64_t>>>(
          "train.dist.custom_pipeline_stage_id", std::nullopt))
    return schedule::custom_partition(*custom, layers, stages);
  const std::string balance = cfg.get_or<std::string>("train.dist.balance", "uniform");
  if (balance == "measured") return schedule::balanced_partition(cost).stage_of;
  if (balance == "memory") return schedule::memory_proportional_partition(cost);
  return schedule::uniform_partition(layers, stages);
}

int plan(const PlanOptions& options) {
  const config::Config cfg = config::load_libai_config(options.config, options.overrides, {});
  const int stages = cfg.get<int>("train.dist.pipeline_parallel_size");
  const auto layers_opt =
      cfg.get_or<std::optional<int>>("train.dist.pipeline_num_layers", std::nullopt);
  LIBAI_CHECK(layers_opt.has_value(), options.config,
              ": train.dist.pipeline_num_layers is null; planning needs the layer count (set "
              "it, or give a model once models can be loaded)");
  const int layers = *layers_opt;
  const int micro_batches = std::max(1, cfg.get_or<int>("train.num_accumulation_steps", 1));
  std::vector<double> speed = cfg.get_or<std::vector<double>>(
      "train.dist.device_speed", std::vector<double>(size_t(stages), 1.0));
  LIBAI_CHECK(int(speed.size()) == stages, options.config, ": train.dist.device_speed has ",
              speed.size(), " entries but pipeline_parallel_size is ", stages);

  schedule::CostModel cost;
  for (int s = 0; s < stages; ++s)
    cost.layer_time.push_back(std::vector<double>(size_t(layers), 1.0 / speed[size_t(s)]));
  cost.layer_memory.assign(size_t(layers), 1.0);
  cost.memory_cap.assign(size_t(stages), 0.0);  // memory profiles arrive with the node agents
  const schedule::StageAssignment split = choose_split(cfg, cost, layers, stages);
  const schedule::Partition part = schedule::evaluate(cost, split);

  schedule::StageCosts costs;
  for (int s = 0; s < stages; ++s) {
    costs.forward.push_back(part.stage_time[size_t(s)]);
    costs.backward.push_back(2 * part.stage_time[size_t(s)]);
  }
  const auto timeline = schedule::simulate(schedule::one_f_one_b(stages, micro_batches), costs);
  // The ideal: all work (3 units per layer per micro-batch) spread over the combined speed.
  double total_speed = 0;
  for (double v : speed) total_speed += v;
  const double ideal = 3.0 * layers * micro_batches / total_speed;

  std::printf("plan: %d layers, %d stages, %d micro-batches (1F1B), balance %s\n", layers, stages,
              micro_batches, cfg.get_or<std::string>("train.dist.balance", "uniform").c_str());
  for (int s = 0; s < stages; ++s) {
    int first = -1, last = -1;
    for (int l = 0; l < layers; ++l)
      if (split[size_t(l)] == s) {
        if (first < 0) first = l;
        last = l;
      }
    std::printf("  stage %d: layers %d-%d (%d), device speed %.2f, %.2f units per micro-batch\n", s,
                first, last, last - first + 1, speed[size_t(s)], part.stage_time[size_t(s)]);
  }
  std::printf(
      "\npredicted timeline of one step (digits: forward of micro-batch k, letters: "
      "backward):\n%s",
      schedule::render_timeline(timeline, stages, options.width).c_str());
  std::printf("\nstep time %.2f units (ideal %.2f: %.0f%% of the devices' combined speed)\n",
              timeline.step_time, ideal, 100.0 * ideal / timeline.step_time);
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
  return [options] { return plan(*options); };
}

}  // namespace libai::cli
