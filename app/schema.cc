// The keys follow LiBai's names (configs/common/*.yaml holds their defaults).
#include "app/schema.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>

namespace libai::config {

namespace {

Schema count_at_least(double bound) { return Schema::integer().min(bound); }

// LiBai's schedulers (libai/scheduler/lr_scheduler.py): each reads the keys its comment names;
// the others keep their defaults.
Schema scheduler_schema() {
  return Schema::map()
      .key("_target_",
           Schema::one_of({"WarmupCosineLR", "WarmupCosineAnnealingLR", "WarmupStepLR",
                           "WarmupMultiStepLR", "WarmupExponentialLR", "WarmupPolynomialLR"})
               .required())
      .key("warmup_factor", Schema::floating().min(0).max(1).doc(
                                "lr factor at iteration 0 of the warm-up (all schedulers)"))
      .key("warmup_method", Schema::one_of({"linear", "constant"}))
      .key("alpha", Schema::floating().min(0).max(1).doc(
                        "WarmupCosineLR: the final lr as a fraction of the base lr"))
      .key("eta_min", Schema::floating().min(0).doc("WarmupCosineAnnealingLR: the final lr"))
      .key("step_size", count_at_least(1).doc("WarmupStepLR: iterations between decays"))
      .key("gamma", Schema::floating().greater_than(0).doc(
                        "WarmupStepLR, WarmupMultiStepLR, WarmupExponentialLR: decay factor"))
      .key("milestones",
           Schema::list_of(Schema::floating().greater_than(0).max(1))
               .doc("WarmupMultiStepLR: where the lr decays, as fractions of train_iter"))
      .key("power", Schema::floating().greater_than(0).doc("WarmupPolynomialLR: the exponent"))
      .key("end_learning_rate",
           Schema::floating().min(0).doc("WarmupPolynomialLR: the lr at the end"))
      .key("cycle", Schema::boolean().doc("WarmupPolynomialLR: restart the decay each period"));
}

// The keys graph.auto_parallel searches over: null leaves them to the planner (elsewhere null is
// the default: 1, 1f1b, off); a value is a constraint.
constexpr const char* kSearched = "null: 1, or the planner's choice under graph.auto_parallel";

Schema train_schema() {
  Schema dist =
      Schema::map()
          .key("data_parallel_size", count_at_least(1).nullable().doc(kSearched))
          .key("tensor_parallel_size", count_at_least(1).nullable().doc(kSearched))
          .key("pipeline_parallel_size", count_at_least(1).nullable().doc(kSearched))
          .key("pipeline_num_layers", count_at_least(1).nullable().doc("null: from the model"))
          .key("custom_pipeline_stage_id",
               Schema::list_of(count_at_least(0))
                   .nullable()
                   .doc("stage of each layer, e.g. [0,0,1,1]; null: chosen by `balance`"))
          .key("balance", Schema::one_of({"uniform", "measured", "memory"})
                              .nullable()
                              .doc("null: uniform, or the planner's choice (uniform or measured) "
                                   "under graph.auto_parallel; how the layers split over the "
                                   "pipeline stages"))
          .key("pipeline_schedule",
               Schema::one_of({"gpipe", "1f1b", "interleaved"})
                   .nullable()
                   .doc("null: 1f1b, or the planner's choice under graph.auto_parallel; "
                        "training's pipeline schedule: gpipe (all forwards, then all "
                        "backwards), 1f1b (Megatron's one-forward-one-backward), interleaved "
                        "(1F1B over virtual_pipeline_size model chunks per pipeline rank)"))
          .key("virtual_pipeline_size",
               count_at_least(1).nullable().doc("null: 1, or the planner's choice under graph.auto_parallel; model chunks (virtual stages) per pipeline rank; more "
                                     "than 1 only with pipeline_schedule interleaved"))
          .key("stage_precision",
               Schema::satisfying("auto, or a list of precisions, one per pipeline stage",
                                  [](const Node& n) {
                                    if (n.is_list())
                                      return std::all_of(n.items().begin(), n.items().end(),
                                                         [](const Node& i) { return i.is_scalar(); });
                                    return n.kind() == Node::Kind::string && n.as_string() == "auto";
                                  })
                   .nullable()
                   .doc("run and serve jobs: the weights' precision on each pipeline slot's "
                        "devices (f32, bf16, int8, int8-dynamic, q4, q4:GROUP, q4:GROUP:min), "
                        "e.g. [bf16, bf16, q4]; auto: the planner gives up the least precision "
                        "that fits (from stage_precision_choices); null: model.quantize on all"))
          .key("stage_precision_choices",
               Schema::list_of(Schema::string())
                   .nullable()
                   .doc("stage_precision auto: the precisions to choose from, the most precise "
                        "first; null: [f32, bf16, int8, q4]"))
          .key("device_speed",
               Schema::list_of(Schema::floating().greater_than(0))
                   .nullable()
                   .doc("what-if planning: relative speed of each device (or of each stage's "
                        "devices), e.g. [1, 4]; null: as measured when nodes join (or all equal)"))
          .key("device_memory",
               Schema::list_of(Schema::floating().greater_than(0))
                   .nullable()
                   .doc("what-if planning: GiB of memory of each device (or of each stage's "
                        "devices); null: as measured when nodes join (or unlimited)"))
          .key("layer_memory",
               Schema::floating().min(0).nullable().doc(
                   "what-if planning: GiB each layer holds (weights; in training also "
                   "gradients and optimizer state); null: from the model (or 0)"))
          .key("activation_memory",
               Schema::floating().min(0).nullable().doc(
                   "what-if planning: GiB each layer keeps per micro-batch in flight (for "
                   "generation: per group, its KV cache); null: from the model (or 0)"));
  Schema checkpointer =
      Schema::map().key("period", count_at_least(1)).key("max_to_keep", count_at_least(1));
  // PyTorch's GradScaler constants (LiBai uses the same); used with dtype f16 only.
  Schema loss_scale =
      Schema::map()
          .key("init_scale", Schema::floating().greater_than(0).doc("the first loss scale"))
          .key("growth_factor",
               Schema::floating().greater_than(1).doc("scale x this after growth_interval "
                                                      "steps without inf or nan"))
          .key("backoff_factor", Schema::floating().greater_than(0).less_than(1).doc(
                                     "scale x this after a step with inf or nan gradients"))
          .key("growth_interval", count_at_least(1));
  Schema amp = Schema::map()
                   .key("enabled", Schema::boolean())
                   .key("dtype", Schema::one_of({"bf16", "f16"}))
                   .key("loss_scale", std::move(loss_scale));
  Schema zero =
      Schema::map()
          .key("enabled", Schema::boolean().nullable().doc("null: off, or the planner's choice "
                                                           "(with its stage) under graph.auto_parallel"))
          .key("stage", Schema::integer().min(0).max(3));
  Schema cluster =
      Schema::map()
          .key("token", Schema::string().nullable().doc("shared secret the nodes present"))
          .key("nodes", count_at_least(1))
          .key("node_rank", count_at_least(0))
          .key("addr", Schema::string())
          .key("port", Schema::integer().min(0).max(65535))
          .key("join_timeout", Schema::floating().greater_than(0).doc(
                                   "seconds node 0 waits for every node to join"))
          .key("heartbeat_timeout",
               Schema::floating().greater_than(0).doc(
                   "seconds without a heartbeat from a node, or without progress of a stage's "
                   "current piece of work, after which the job ends naming them; must exceed the "
                   "longest single action, step end or checkpoint"))
          .key("devices_per_node", count_at_least(1).doc("devices (stage slots) of each node"))
          .key("transport",
               Schema::one_of({"auto", "shm", "ucx"})
                   .doc("data plane between the nodes: shm (shared memory, every node on this "
                        "host), ucx (any hosts), auto (shm when every node shares this host's "
                        "memory, else ucx)"))
          .key("local_hop_seconds",
               Schema::floating().min(0).nullable().doc(
                   "planning: seconds one packet hop costs inside a process (null: measured by "
                   "run when the cluster forms, 0 for plan)"))
          .key("remote_hop_seconds",
               Schema::floating().min(0).nullable().doc(
                   "planning: seconds one packet hop costs between nodes (null: measured by run "
                   "when the cluster forms, 0 for plan)"))
          .key("device_threads", count_at_least(1).doc("compute threads of each CPU device"))
          .key("device_slowdown",
               Schema::list_of(Schema::floating().min(1))
                   .nullable()
                   .doc("emulated slower devices, one factor per device of the cluster in node "
                        "order: a device sleeps (factor - 1) x its compute time after each "
                        "action (null: all 1)"))
          .key("profiles",
               Schema::map().open().nullable().doc(
                   "what-if planning: measured device fields to override, by device name, e.g. "
                   "{node0:cpu:1: {matmul_gflops: 50}} (runtime/device_profile.h)"));
  return Schema::map()
      .key("output_dir", Schema::string())
      .key("train_micro_batch_size", count_at_least(1).nullable().doc(
                                         "null: global batch / (accumulation steps x data parallel "
                                         "size), or the planner's choice under graph.auto_parallel"))
      .key("global_batch_size", count_at_least(1).nullable().doc(
                                    "null: micro batch x accumulation steps x data parallel size"))
      .key("num_accumulation_steps",
           count_at_least(1).nullable().doc(
               "micro-batches per optimizer step; null: global batch / (micro batch x data "
               "parallel size)"))
      .key("train_iter", count_at_least(0))
      .key("train_epoch", Schema::floating().min(0).doc(
                              "epochs of the training split (> 0: train_iter is computed from it)"))
      .key("evaluation", Schema::map()
                             .key("enabled", Schema::boolean())
                             .key("eval_period", count_at_least(1).doc("steps between evaluations"))
                             .key("eval_iter", count_at_least(1).doc(
                                                   "validation micro-batches per rank per evaluation")))
      .key("warmup_ratio",
           Schema::floating().min(0).max(1).doc("warm-up iterations = warmup_ratio x train_iter"))
      .key("scheduler", scheduler_schema())
      .key("seed", count_at_least(0))
      .key("log_period", count_at_least(1))
      .key("checkpointer", std::move(checkpointer))
      .key("dist", std::move(dist))
      .key("amp", std::move(amp))
      .key("activation_checkpoint",
           Schema::map().key("enabled", Schema::boolean().nullable().doc(
                                            "null: off, or the planner's choice under "
                                            "graph.auto_parallel")))
      .key("zero_optimization", std::move(zero))
      .key("cluster", std::move(cluster));
}

// The order of the gradient norm for clipping: 2 (2.0) or inf (written inf, "inf" or .inf).
bool is_norm_order(const Node& value) {
  if (value.kind() == Node::Kind::string) return value.as_string() == "inf";
  if (value.kind() == Node::Kind::integer || value.kind() == Node::Kind::floating) {
    const double order = value.as_float();
    return order == 2.0 || (std::isinf(order) && order > 0);
  }
  return false;
}

Schema optim_schema() {
  // LiBai's get_default_optimizer_params: clipping and the weight decay of norms and biases.
  Schema group_override = Schema::map()
                              .key("lr", Schema::floating().greater_than(0))
                              .key("weight_decay", Schema::floating().min(0));
  Schema params =
      Schema::map()
          .key("clip_grad_max_norm",
               Schema::floating().greater_than(0).nullable().doc("null: no clipping"))
          .key("clip_grad_norm_type",
               Schema::satisfying("2 or inf", is_norm_order).doc("the order of the global norm"))
          .key("weight_decay_norm",
               Schema::floating().min(0).doc("weight decay of normalization layers' parameters"))
          .key("weight_decay_bias", Schema::floating().min(0).doc("weight decay of biases"))
          .key("overrides", Schema::map()
                                .open()
                                .values(std::move(group_override))
                                .doc("parameter name -> {lr, weight_decay} for that parameter"));
  return Schema::map()
      .key("_target_", Schema::one_of({"adamw", "sgd"}).required())
      .key("lr", Schema::floating().greater_than(0))
      .key("weight_decay", Schema::floating().min(0))
      .key("betas", Schema::list_of(Schema::floating().min(0).less_than(1))
                        .min_items(2)
                        .max_items(2)
                        .doc("adamw"))
      .key("eps", Schema::floating().greater_than(0).doc("adamw"))
      .key("do_bias_correction", Schema::boolean().doc("adamw"))
      .key("momentum", Schema::floating().min(0).doc("sgd"))
      .key("dampening", Schema::floating().min(0).doc("sgd"))
      .key("nesterov", Schema::boolean().doc("sgd: needs momentum > 0 and dampening 0"))
      .key("params", std::move(params))
      .key("clip_grad_norm", Schema::floating()
                                 .greater_than(0)
                                 .nullable()
                                 .alias_of("optim.params.clip_grad_max_norm")
                                 .doc("shorthand for params.clip_grad_max_norm"));
}

// The datasets of a training run (train/data_config.h).
Schema data_schema() {
  return Schema::map()
      .key("_target_", Schema::one_of({"gpt", "bert", "t5", "image_folder"}).required())
      .key("prefix", Schema::string().nullable().doc(
                         "an indexed dataset (gpt, bert, t5): made by libai-actor preprocess"))
      .key("seq_length", count_at_least(1))
      .key("splits", Schema::list_of(Schema::floating().min(0)).min_items(1).max_items(3).doc(
                         "train / validation / test weights over the documents"))
      .key("seed", count_at_least(0).nullable().doc("the data seed (shuffles); null: train.seed"))
      .key("cls_id", count_at_least(0).doc("bert"))
      .key("sep_id", count_at_least(0).doc("bert"))
      .key("mask_id", count_at_least(0).doc("bert"))
      .key("pad_id", count_at_least(0).doc("bert, t5"))
      .key("masked_lm_prob", Schema::floating().greater_than(0).less_than(1).doc("bert"))
      .key("sentinel_start", count_at_least(0).nullable().doc(
                                 "t5: the id of <extra_id_0>; null: vocab_size - 1"))
      .key("eos_id", count_at_least(0).doc("t5"))
      .key("noise_density", Schema::floating().greater_than(0).less_than(1).doc("t5"))
      .key("mean_noise_span_length", Schema::floating().greater_than(0).doc("t5"))
      .key("path", Schema::string().nullable().doc("image_folder: root/<class>/<images>"))
      .key("validation_path",
           Schema::string().nullable().doc("image_folder: the validation images"));
}

// graph.auto_parallel (LiBai's key): the planner searches the layout (plan/auto_parallel.h).
Schema graph_schema() {
  const auto link = [](const char* bandwidth, const char* latency) {
    return Schema::map()
        .key("bandwidth_gbs", Schema::floating().greater_than(0).nullable().doc(bandwidth))
        .key("latency_seconds", Schema::floating().min(0).nullable().doc(latency));
  };
  return Schema::map()
      .key("enabled", Schema::boolean())
      .key("auto_parallel",
           Schema::map()
               .key("enabled", Schema::boolean().doc(
                                   "search data x tensor x pipeline sizes, micro-batch size, ZeRO, "
                                   "checkpointing and schedule (libai-actor plan); the train.dist, "
                                   "micro-batch, ZeRO and checkpointing keys that are set are "
                                   "constraints"))
               .key("intra_node",
                    link("GB/s between devices of a node (null: probed, two ranks of this "
                         "process all-reducing)",
                         "seconds a message costs (null: probed)"))
               .key("inter_node",
                    link("GB/s between nodes (null: measured by the cluster as it forms; plan and "
                         "one node: a tenth of the probed bandwidth)",
                         "seconds a message costs (null: train.cluster.remote_hop_seconds, else "
                         "the probed latency)")));
}

Schema builtin_schema() {
  return Schema::map()
      .key("train", train_schema())
      .key("optim", optim_schema())
      .key("graph", graph_schema())
      .key("model", Schema::map().open().doc("owned by models/; open until it registers"))
      .key("data", data_schema())
      .key("job", Schema::map().open().key("_target_", Schema::string().required()));
}

struct Registered {
  std::mutex mutex;
  std::vector<std::pair<std::string, Schema>> sections;
};

Registered& registered() {
  static Registered instance;
  return instance;
}

}  // namespace

void register_schema(const std::string& dotted_path, Schema section) {
  Registered& all = registered();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.sections.emplace_back(dotted_path, std::move(section));
}

Schema libai_schema() {
  Schema schema = builtin_schema();
  Registered& all = registered();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (const auto& [path, section] : all.sections) schema.mount(path, section);
  return schema;
}

Config load_libai_config(const std::string& path, const std::vector<std::string>& overrides,
                         LoadOptions options) {
  const Schema schema = libai_schema();
  options.schema = &schema;
  Config config = Config::load(path, overrides, options);
  config.validate(schema);
  return config;
}

}  // namespace libai::config
