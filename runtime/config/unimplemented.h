// Config keys the schema accepts but a command does not act on: each is an error naming the
// key, where it was written and why, never a silently ignored setting.
//
//   const Config cfg = load_libai_config(path, overrides);       // the schema's checks
//   check_implemented(cfg, Purpose::inference_job);              // throws Unsupported, e.g.
//   // "job.yaml:7:14: key 'train.amp.enabled' = true: train.amp applies to training; run jobs
//   //  are inference (they compute in f32)"
//
// A key is checked only at a value that would need the missing feature (zero_optimization's
// `enabled: true`, a non-null what-if key): the shipped defaults of every key pass. The list
// of rules, by purpose, is in docs/CONFIG.md ("Keys that are not implemented").
#pragma once

#include <string>
#include <vector>

#include "runtime/config/config.h"

namespace libai::config {

// What the config is loaded for; each purpose reads a different part of the keys.
enum class Purpose {
  // `libai-actor run` (generate, encode, synthetic on the actor runtime), and `libai-actor plan`
  // of such a job (the same plan, from measured devices and the model's costs).
  inference_job,
  // Eager training: train/ on one device or the eager SPMD harness (tensor and data parallel).
  training,
  // Graph-mode training (graph.enabled: true): the actor runtime's training stages
  // (actors/jobs/model_train_job.h), pipeline, data and tensor parallel, in one process or several.
  graph_training,
  // `libai-actor plan` of a job without model costs: unit costs and train.dist's what-if keys.
  what_if_plan,
};

const char* purpose_name(Purpose purpose);

// One message per key set to a value `purpose` cannot act on; empty when all is implemented.
std::vector<std::string> unimplemented_problems(const Node& root, Purpose purpose);

// Throws Unsupported listing every problem (one a line) when there is any.
void check_implemented(const Config& config, Purpose purpose);

}  // namespace libai::config
