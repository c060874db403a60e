#include "runtime/config/unimplemented.h"

#include "runtime/error.h"

namespace libai::config {

namespace {

class Problems {
 public:
  explicit Problems(const Node& root) : root_(root) {}

  // The value at `key`, or nullptr when it is absent.
  const Node* at(const char* key) const { return root_.find_path(key); }
  bool is_true(const char* key) const {
    const Node* value = at(key);
    return value != nullptr && value->kind() == Node::Kind::boolean && value->as_bool();
  }
  bool is_false(const char* key) const {
    const Node* value = at(key);
    return value != nullptr && value->kind() == Node::Kind::boolean && !value->as_bool();
  }
  bool is_set(const char* key) const {
    const Node* value = at(key);
    return value != nullptr && !value->is_null();
  }
  std::string job_target() const {
    const Node* target = at("job._target_");
    return target != nullptr && target->kind() == Node::Kind::string ? target->as_string()
                                                                     : "train";
  }

  void add(const char* key, const std::string& why) {
    const Node& value = *at(key);
    list_.push_back(value.describe() + " = " + value.repr() + ": " + why);
  }
  void add_if_true(const char* key, const std::string& why) {
    if (is_true(key)) add(key, why);
  }
  void add_if_set(const char* key, const std::string& why) {
    if (is_set(key)) add(key, why);
  }

  std::vector<std::string> take() { return std::move(list_); }

 private:
  const Node& root_;
  std::vector<std::string> list_;
};

constexpr const char* kWhatIfKeys[] = {"train.dist.device_speed", "train.dist.device_memory",
                                       "train.dist.layer_memory", "train.dist.activation_memory"};
constexpr const char* kRuntimeDeviceKeys[] = {
    "train.cluster.device_slowdown", "train.cluster.profiles", "train.cluster.local_hop_seconds",
    "train.cluster.remote_hop_seconds"};

// graph.auto_parallel.enabled: `libai-actor plan` searches and prints the keys to set,
// graph-mode `libai-actor train` and the generate and encode jobs of `libai-actor run` apply
// the search's choice (a run job names the kinds it refuses); eager training does not.
void auto_parallel_not_applied(Problems& problems) {
  problems.add_if_true("graph.auto_parallel.enabled",
                       "the layout search runs in `libai-actor plan` of a model's training, which "
                       "prints the chosen layout and the keys that run it, in `libai-actor "
                       "train` in graph mode (graph.enabled: true) and in `libai-actor run` of "
                       "generate and encode jobs; elsewhere set those keys and leave "
                       "auto_parallel off");
}

// Precision per pipeline stage is of inference stages (quantized training is not in scope).
void stage_precision_not_trained(Problems& problems, const char* why) {
  for (const char* key : {"train.dist.stage_precision", "train.dist.stage_precision_choices"})
    problems.add_if_set(key, why);
}

void inference_job(Problems& problems) {
  if (problems.is_false("graph.enabled"))
    problems.add("graph.enabled",
                 "eager execution of a run job is not implemented: run jobs execute on the "
                 "actor runtime (set graph.enabled: true)");
  problems.add_if_true("train.amp.enabled",
                       "train.amp applies to training; run jobs are inference (they compute in "
                       "f32)");
  problems.add_if_true("train.activation_checkpoint.enabled",
                       "activation checkpointing applies to training; run jobs are inference "
                       "(no backward)");
  problems.add_if_true("train.zero_optimization.enabled",
                       "ZeRO shards training state (optimizer state, gradients, parameters); "
                       "run jobs are inference (a synthetic_train job has no optimizer to "
                       "shard): train with `libai-actor train`");
  for (const char* key : kWhatIfKeys)
    problems.add_if_set(key,
                        "a what-if planning key, read only by `libai-actor plan` of a job "
                        "without model costs; this job's costs come from its model (or "
                        "job.layer_seconds) on measured devices (emulate slower devices with "
                        "train.cluster.device_slowdown, set their fields with "
                        "train.cluster.profiles)");
}

// Both training modes: chunks per pipeline rank exist only with a pipeline to interleave.
void pipeline_chunks(Problems& problems) {
  const Node* chunks = problems.at("train.dist.virtual_pipeline_size");
  const Node* pp = problems.at("train.dist.pipeline_parallel_size");
  if (chunks == nullptr || chunks->kind() != Node::Kind::integer || chunks->as_int() <= 1) return;
  if (pp == nullptr || pp->kind() != Node::Kind::integer || pp->as_int() <= 1)
    problems.add("train.dist.virtual_pipeline_size",
                 "model chunks per pipeline rank need pipeline_parallel_size > 1 (there is no "
                 "pipeline to interleave); leave it 1");
}

constexpr const char* kTrainedInF32 =
    "the weights' precision per pipeline stage is for generate, encode and serve jobs of "
    "`libai-actor run` and `serve`; training holds its weights in f32 (quantized training is "
    "not implemented)";

void training(Problems& problems) {
  auto_parallel_not_applied(problems);
  stage_precision_not_trained(problems, kTrainedInF32);
  pipeline_chunks(problems);
  if (problems.is_true("graph.enabled"))
    problems.add("graph.enabled",
                 "this is eager training (train::run_training); graph-mode training runs "
                 "through the actor runtime: `libai-actor train` with graph.enabled: true");
  // Eager pipeline training (train/pipeline_runner.h) cuts the layers evenly.
  problems.add_if_set("train.dist.custom_pipeline_stage_id",
                      "eager pipeline training cuts the layers evenly over the stages; a "
                      "custom split is not implemented yet (leave it null)");
  for (const char* key : kWhatIfKeys)
    problems.add_if_set(key,
                        "a what-if planning key, read only by `libai-actor plan`; training "
                        "does not read it");
  for (const char* key : kRuntimeDeviceKeys)
    problems.add_if_set(key,
                        "a device key of the actor runtime (`libai-actor run` and `plan`); "
                        "eager training does not read it");
}

void graph_training(Problems& problems) {
  pipeline_chunks(problems);
  stage_precision_not_trained(problems, kTrainedInF32);
  problems.add_if_true("train.amp.enabled",
                       "mixed precision through the training stage actors is not implemented "
                       "yet (set graph.enabled: false for amp)");
  if (const Node* epochs = problems.at("train.train_epoch");
      epochs != nullptr && !epochs->is_null() && epochs->is_scalar() &&
      epochs->kind() != Node::Kind::string && epochs->kind() != Node::Kind::boolean &&
      epochs->as_float() != 0)
    problems.add("train.train_epoch",
                 "graph-mode training counts steps: set train.train_iter (train_epoch is read "
                 "by eager training only)");
  for (const char* key : kWhatIfKeys)
    problems.add_if_set(key,
                        "a what-if planning key, read only by `libai-actor plan`; training "
                        "does not read it");
}

void what_if_plan(Problems& problems) {
  stage_precision_not_trained(problems,
                              "the weights' precision per stage is planned from a model's "
                              "costs (a generate, encode or serve job's model.weights); a what-if "
                              "plan of train.dist.layer_memory has no precisions to price");
  problems.add_if_true("graph.auto_parallel.enabled",
                       "the layout search needs a model's costs (model.config or model.weights "
                       "for training, model.weights for a generate or encode job); a what-if "
                       "plan of train.dist.device_speed and the memory keys is not searched");
  if (problems.is_false("graph.enabled"))
    problems.add("graph.enabled",
                 "a plan is of the actor runtime's pipeline (graph mode); eager execution has "
                 "no plan (set graph.enabled: true)");
  const std::string target = problems.job_target();
  if (target == "train") {
    problems.add_if_true("train.activation_checkpoint.enabled",
                         "the planner does not model recomputation yet (it costs a backward as "
                         "two forwards and keeps train.dist.activation_memory per micro-batch "
                         "in flight)");
  } else {
    const std::string inference = "; this plan is of a " + target + " job, which is inference";
    problems.add_if_true("train.amp.enabled", "train.amp applies to training" + inference);
    problems.add_if_true("train.activation_checkpoint.enabled",
                         "activation checkpointing applies to training" + inference);
    problems.add_if_true("train.zero_optimization.enabled",
                         "ZeRO shards training's model state" + inference);
  }
  for (const char* key : kRuntimeDeviceKeys)
    problems.add_if_set(key,
                        "read by `libai-actor run` and by plans of jobs with model costs; a "
                        "what-if plan takes its devices from train.dist.device_speed and "
                        "train.dist.device_memory");
}

}  // namespace

const char* purpose_name(Purpose purpose) {
  switch (purpose) {
    case Purpose::inference_job: return "a run job";
    case Purpose::training: return "training";
    case Purpose::what_if_plan: return "a what-if plan";
    case Purpose::graph_training: return "graph-mode training";
  }
  return "?";
}

std::vector<std::string> unimplemented_problems(const Node& root, Purpose purpose) {
  Problems problems(root);
  switch (purpose) {
    case Purpose::inference_job: inference_job(problems); break;
    case Purpose::training: training(problems); break;
    case Purpose::what_if_plan: what_if_plan(problems); break;
    case Purpose::graph_training: graph_training(problems); break;
  }
  return problems.take();
}

void check_implemented(const Config& config, Purpose purpose) {
  const std::vector<std::string> problems = unimplemented_problems(config.root(), purpose);
  if (problems.empty()) return;
  if (problems.size() == 1) LIBAI_THROW(Unsupported, problems.front());
  std::string message =
      str_cat(problems.size(), " settings are not implemented for ", purpose_name(purpose), ":");
  for (const std::string& problem : problems) message += "\n  " + problem;
  LIBAI_THROW(Unsupported, message);
}

}  // namespace libai::config
