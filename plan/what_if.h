// The what-if plan of a config without a model (`libai-actor plan` of a config whose job has no
// known costs): every layer costs one unit of forward time (two of backward; a decoding step as
// much as the prefill) on a device of speed 1, and keys under `train.dist` describe the devices
// and the model: `device_speed` (relative speed, per device or per stage), `device_memory`
// (GiB, per device or per stage), `layer_memory` (GiB each layer holds) and `activation_memory`
// (GiB per layer for each micro-batch in flight; for `generate`, each group's KV cache).
//
//   WhatIfPlan what_if = plan_what_if(cfg, "job.yaml", /*width=*/72);
//   std::cout << what_if.text;          // the split, memory, timeline, step time, bubble
//   schedule::validate(what_if.plan);   // throws when it cannot run, after it has been shown
//
// What is planned follows `job._target_`: `train` runs `train.dist.pipeline_schedule` (gpipe,
// 1f1b or interleaved over `train.dist.virtual_pipeline_size` chunks per stage) over
// `train.num_accumulation_steps` micro-batches of `train.train_micro_batch_size` samples and
// shows the predicted bubble beside the ideal formula and the activations the schedule stashes;
// `generate` decodes `job.num_groups` groups (default: one per stage) of `job.group_size`
// sequences (default 1) for `job.max_new_tokens` steps (default 32); any other target runs one
// forward over `job.num_micro_batches` micro-batches (default: one per stage) of
// `job.micro_batch_size`.
//
// Training with `train.zero_optimization` enabled costs each rank's model state by ZeRO's memory
// model at its `stage` over the data-parallel replicas (Note [ZeRO memory model] in
// schedule/zero_memory.h) and prints its terms per rank; `layer_memory` is then read as the
// layer's model state without ZeRO (f32 weights, gradients and AdamW's moments: 16 bytes a
// parameter), so a layer has layer_memory / 16 parameters and is one unit.
#pragma once

#include <string>

#include "runtime/config/config.h"
#include "schedule/plan.h"

namespace libai::plan {

struct WhatIfPlan {
  schedule::Plan plan;
  std::string text;  // what `libai-actor plan` prints, lines ending in '\n'
};

// Throws InvalidArgument naming the key (in `file`) of a config it cannot plan.
WhatIfPlan plan_what_if(const config::Config& cfg, const std::string& file, int width);

// "GPipe", "1F1B", "interleaved 1F1B, 2 chunks per stage".
std::string schedule_title(const schedule::Plan& plan);

// The cross-key rules of train.dist.pipeline_schedule (virtual_pipeline_size needs the
// interleaved schedule, whose micro-batches come in groups of pp and whose split is uniform),
// named by key in `file` before the planner sees the request.
void check_train_schedule(const schedule::PlanRequest& request, const config::Config& cfg,
                          const std::string& file);

}  // namespace libai::plan
