// The keys follow LiBai's names (configs/common/*.yaml holds their defaults).
#include "runtime/config/libai_schema.h"

#include <mutex>
#include <utility>

namespace libai::config {

namespace {

Schema count_at_least(double bound) { return Schema::integer().min(bound); }

Schema train_schema() {
  Schema dist =
      Schema::map()
          .key("data_parallel_size", count_at_least(1))
          .key("tensor_parallel_size", count_at_least(1))
          .key("pipeline_parallel_size", count_at_least(1))
          .key("pipeline_num_layers", count_at_least(1).nullable().doc("null: from the model"))
          .key("custom_pipeline_stage_id",
               Schema::list_of(count_at_least(0))
                   .nullable()
                   .doc("stage of each layer, e.g. [0,0,1,1]; null: chosen by `balance`"))
          .key("balance", Schema::one_of({"uniform", "measured", "memory"}))
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
  Schema amp =
      Schema::map().key("enabled", Schema::boolean()).key("dtype", Schema::one_of({"bf16", "f16"}));
  Schema zero =
      Schema::map().key("enabled", Schema::boolean()).key("stage", Schema::integer().min(0).max(3));
  Schema cluster =
      Schema::map()
          .key("token", Schema::string().nullable().doc("shared secret the nodes present"))
          .key("nodes", count_at_least(1))
          .key("node_rank", count_at_least(0))
          .key("addr", Schema::string())
          .key("port", Schema::integer().min(0).max(65535))
          .key("join_timeout", Schema::floating().greater_than(0).doc(
                                   "seconds node 0 waits for every node to join"))
          .key("devices_per_node", count_at_least(1).doc("devices (stage slots) of each node"))
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
      .key("train_micro_batch_size", count_at_least(1))
      .key("global_batch_size", count_at_least(1).nullable().doc(
                                    "null: micro batch x accumulation steps x data parallel size"))
      .key("num_accumulation_steps", count_at_least(1))
      .key("train_iter", count_at_least(0))
      .key("seed", count_at_least(0))
      .key("log_period", count_at_least(1))
      .key("checkpointer", std::move(checkpointer))
      .key("dist", std::move(dist))
      .key("amp", std::move(amp))
      .key("activation_checkpoint", Schema::map().key("enabled", Schema::boolean()))
      .key("zero_optimization", std::move(zero))
      .key("cluster", std::move(cluster));
}

Schema optim_schema() {
  return Schema::map()
      .key("_target_", Schema::string().required())
      .key("lr", Schema::floating().greater_than(0))
      .key("weight_decay", Schema::floating().min(0))
      .key("betas",
           Schema::list_of(Schema::floating().min(0).less_than(1)).min_items(2).max_items(2))
      .key("eps", Schema::floating().greater_than(0))
      .key("clip_grad_norm",
           Schema::floating().greater_than(0).nullable().doc("null: no clipping"));
}

Schema builtin_schema() {
  return Schema::map()
      .key("train", train_schema())
      .key("optim", optim_schema())
      .key("graph", Schema::map().key("enabled", Schema::boolean()))
      .key("model", Schema::map().open().doc("owned by models/; open until it registers"))
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
