// The job a run config describes, read and checked: what `libai-actor run CONFIG` runs on every
// node (actors/jobs/config_job.h runs it as a ClusterJob) and what `libai-actor plan` plans. No
// actors here: the config's keys, the job's shape for the planner (plan/run_plan.h), its
// devices measured, and the layout search.
//
//   RunJob job(cfg, /*nodes=*/2);
//   std::vector<DeviceProfile> devices = job.devices_like_this_node();   // or measure_devices
//   schedule::Plan plan = compile_job_plan(job.shape(), devices);
//
//   job._target_: generate   GPT-2, T5 or MT5 generation: model.weights (a Hugging Face
//                            folder), job.prompts (texts) or job.prompt_ids (lists of ids;
//                            T5: the encoder's input), job.max_new_tokens, job.num_groups
//                            (groups of sequences in flight; default one per stage), and
//                            generate's options (do_sample, temperature, top_k, top_p, seed,
//                            num_beams, length_penalty, num_return_sequences,
//                            repetition_penalty, no_repeat_ngram_size, min_new_tokens). The
//                            JSON results' token_ids are the prompt and the new tokens
//                            (T5: the new tokens only, as `libai-actor generate` prints them)
//   job._target_: serve      a generate job whose prompts come from requests (Note [Serve
//                            jobs] in config_job.cc): model.weights, job.max_batch (16: rows
//                            decoded together over the lanes), job.num_groups (lanes; default
//                            one per stage and replica), job.max_queue (256); for the plan:
//                            job.prompt_tokens (32) and job.max_new_tokens (20). Node 0 calls
//                            set_server's function with the service once the stages are loaded.
//   job._target_: encode     BERT family sentence embeddings (mean-pooled, unit length):
//                            model.weights, job.texts, job.micro_batch_size (default 8)
//   job._target_: synthetic  stages of known cost, for benchmarks of the runtime itself:
//                            job.layer_seconds per layer and micro-batch on a device of
//                            slow-down 1, job.num_micro_batches, job.steps (default 1)
//   job._target_: synthetic_train  training through training stage actors over synthetic
//                            stages (Note [Synthetic training jobs]): train.dist.
//                            pipeline_num_layers layers (default one per virtual stage) of
//                            job.layer_seconds forward (default job.forward_seconds, 0.002,
//                            per stage's share) and job.backward_factor x that backward
//                            (default job.backward_seconds / job.forward_seconds, 2), split
//                            by train.dist.balance, job.micro_batches (default 4 pp),
//                            job.schedule (gpipe, 1f1b or interleaved), job.chunks (interleaved:
//                            model chunks per stage, default 2), job.steps, job.elements (floats
//                            per packet, default 2). Results: each step's summary.
//
// Layout: train.dist.{data,tensor,pipeline}_parallel_size over nodes x
// train.cluster.devices_per_node devices, device d of the cluster being node d / per_node;
// slot (replica r, stage s, rank t) sits on device (r * pp + s) * tp + t, so the ranks of a
// stage share a node when per_node is a multiple of tp (required: tensor parallelism stays
// inside a node). The plan is schedule::compile_plan's (plan/run_plan.h: the request from the
// model's per-layer costs and the devices' measured profiles, the same one `libai-actor plan`
// compiles): the split of layers follows train.dist.custom_pipeline_stage_id, else
// train.dist.balance: uniform, memory (in proportion to the devices' free memory: the split
// llama.cpp's RPC backend and exo use), or measured (the optimal contiguous split under the
// devices' measured speed and memory, over the orders of the pipeline slots too: stage s may
// run on slot device_of_stage[s], whose tensor-parallel ranks still share a node). A plan that
// does not fit the devices' memory fails on node 0 before any stage is loaded. With
// graph.auto_parallel.enabled (generate and encode) node 0 chooses the data and pipeline sizes
// and generate's job.num_groups first (Note [Auto parallel of a run job] in
// config_job_search.cc).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ops/packed_linear.h"
#include "plan/run_plan.h"
#include "runtime/config/config.h"
#include "runtime/device_profile.h"

namespace libai::models {
struct HfConfig;
}

namespace libai::plan {

class RunJob {
 public:
  // `cfg`: the resolved job config; `nodes`: the cluster's size. Throws InvalidArgument naming
  // the key for a job this runtime cannot run (sizes that do not fit the devices, a model
  // family without pipeline stages, no prompts, ...).
  RunJob(const config::Config& cfg, int nodes);
  virtual ~RunJob() = default;

  const config::Config& config() const { return cfg_; }
  JobKind kind() const { return kind_; }
  bool serving() const { return serving_; }
  bool training() const { return training_; }  // synthetic_train
  int num_layers() const { return num_layers_; }
  int num_groups() const { return num_groups_; }
  int data_parallel_size() const { return dp_; }
  int pipeline_parallel_size() const { return pp_; }
  // Model calls per group: 1 for encoding, job.steps (synthetic), job.max_new_tokens (generate:
  // the prompt's step and one per new token but the last; fewer when every row ends early).
  int steps() const { return steps_; }
  // What the plan depends on (compile_job_plan; tokenizes encode's texts for their length).
  JobShape shape() const;

  // Node `node_rank`'s devices, measured: rates and the job's timed layer at each device's
  // train.cluster.device_slowdown (Note [Timed layers]), named node<k>:cpu:<d>, with
  // train.cluster.profiles' overrides applied.
  std::vector<DeviceProfile> measure_devices(int node_rank) const;
  // `libai-actor plan`: the devices of a cluster whose every node is like this one: cpu:0
  // measured once with train.cluster.device_threads, each device's rates divided by its
  // train.cluster.device_slowdown, then train.cluster.profiles' fields applied by name.
  std::vector<DeviceProfile> devices_like_this_node() const;

  // graph.auto_parallel.enabled (searching()): chooses the layout over `devices` (every device
  // of the cluster, node order) and the hops the cluster measured (for the keys the config
  // leaves unset), and reads the chosen config (Note [Auto parallel of a run job] in
  // plan/run_search.cc); returns the choice, the next best and the rejected, a line each.
  bool searching() const { return searching_; }
  std::string search_layout(const std::vector<DeviceProfile>& devices, double local_hop_seconds,
                            double remote_hop_seconds);

 protected:
  // Reads `cfg` (again: node 0's config, or the search's choice).
  void read(const config::Config& cfg);

  config::Config cfg_;
  int nodes_ = 1;
  JobKind kind_ = JobKind::generate;
  bool encoder_decoder_ = false;  // a generate job of T5 / MT5
  std::filesystem::path model_;
  ops::QuantSpec quantize_;  // model.quantize
  std::vector<std::string> quantize_keep_;
  // train.dist.stage_precision (JobShape::precisions, slot_precision): empty slot_precision_
  // with precisions_ is `auto` until node 0's plan() chooses.
  std::vector<ops::WeightPrecision> precisions_;
  std::vector<int> slot_precision_;
  int dp_ = 1, tp_ = 1, pp_ = 1, per_node_ = 1, threads_ = 1;
  std::vector<double> slowdown_;  // per device of the cluster
  int num_layers_ = 0, num_groups_ = 1, steps_ = 1;
  double layer_seconds_ = 0.001;
  std::vector<std::string> prompt_texts_, texts_;
  std::vector<std::vector<int64_t>> prompts_;
  int micro_batch_size_ = 8;
  std::string balance_;
  // serve (Note [Serve jobs]).
  bool serving_ = false;
  bool searching_ = false;  // graph.auto_parallel.enabled, the layout not chosen yet
  int max_batch_ = 16, max_queue_ = 256, prompt_tokens_ = 32;
  // synthetic_train (Note [Synthetic training jobs]).
  bool training_ = false;
  double backward_factor_ = 2.0;  // layer_seconds_ is the layer's forward
  std::string schedule_;
  int chunks_ = 1;
  int64_t elements_ = 2;

 private:
  void read_synthetic_training(const config::Config& cfg);
  void read_serving(const config::Config& cfg, const models::HfConfig& hf);
  void read_stage_precision(const config::Config& cfg);
  void check_profile_names() const;
  DeviceProfile with_overrides(DeviceProfile profile) const;
  // `measured` (this host's device at full speed) as device d of `node`: named, its rates and
  // timed layer scaled by that device's train.cluster.device_slowdown.
  DeviceProfile emulated_device(const DeviceProfile& measured, int node, int d) const;
  // Times the job's layer on `device` at `slowdown` into profile.layer_seconds (and
  // layer_step_seconds); leaves them 0 for a model it does not time (Note [Timed layers]).
  void time_layer(Device device, double slowdown, DeviceProfile& profile) const;
};

}  // namespace libai::plan
