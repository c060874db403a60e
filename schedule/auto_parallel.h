// Auto parallel (pure: no threads, no devices): the search behind graph.auto_parallel.enabled.
// Given the devices, the model's layers and the global batch, enumerate every training layout
// that divides (data x tensor x pipeline sizes, micro-batch size and accumulation, ZeRO stage,
// activation checkpointing, pipeline schedule and interleaving), estimate each with a cost model,
// and rank those that fit memory by predicted step time; the user's explicit keys are
// constraints.
//
//   SearchSpace space{.devices = 8, .devices_per_node = 4, .num_layers = 24,
//                     .global_batch = 64, .heads = 16};
//   space.constraints.zero_stage = 1;                         // the config set it
//   TrainCostModel costs = ...;                               // per-layer flops, bytes, devices
//   SearchResult r = search_parallel(space, [&](const ParallelChoice& c) {
//     return estimate_training(costs, c);
//   });
//   r.ranked[0].choice;       // the fastest layout that fits
//   r.rejected;               // the layouts that do not fit, each with its reason
//
// Note [Auto parallel search]
// The space is small enough to search whole: dp x tp x pp = devices has a handful of
// factorisations once tensor parallelism stays inside a node and divides the heads; the
// micro-batch size runs over the divisors of a replica's batch; ZeRO 0-3, checkpointing on and
// off, GPipe, 1F1B and interleaved 1F1B with 2 or 4 chunks multiply it by at most 40. Every
// choice that divides is estimated (a plan compiled and its step simulated, plan.h), so the
// ranking is exact under the cost model and needs no pruning argument; what is excluded before
// estimating (divisibility, the constraints) is reported by reason with counts.
//
// Note [Training cost model]
// estimate_training() builds the choice's PlanRequest and compiles it: one replica's step is
// simulated under the schedule with the stages' memory from ZeRO's model (zero_memory.h) and
// the activations the schedule stashes. On top of plan.h's compute (each layer's roofline time
// for one micro-batch, / tp on a tensor-parallel stage, plus the device's fixed overhead per
// layer and micro-batch, which does not shrink with tp):
//   tensor parallelism  `tensor_collectives` all-reduces of the layer's output (Megatron's two
//                       per layer) per forward, on the node's link (ring: 2 (tp - 1) / tp of the
//                       bytes, 2 (tp - 1) latencies); the backward repeats them with the
//                       compute (backward_factor)
//   checkpointing       the backward re-runs the forward (backward_factor + 1) and each layer
//                       keeps only its input for backward
//   pipeline            each hop between stages sends one micro-batch's hidden states, on the
//                       node's link, or between nodes when the pipeline spans nodes
//   data parallelism    without ZeRO, as the stages do it (models/parallel/data_parallel.h):
//                       each chunk's gradients are all-reduced over dp (ring) in buckets that
//                       start with its last micro-batch's backward, a rank's chunks one after
//                       another, the last bucket (25 MiB) after that backward ends; what
//                       outlasts the simulated pipeline is added to the step. With ZeRO the
//                       fullest rank's gradients move after the pipeline, not overlapped
//                       (reduce-scatter, then the all-gather after the optimizer: an
//                       all-reduce's bytes; ZeRO-3 half as much again for the parameters
//                       gathered in forward and backward). On the node's link when every
//                       replica is inside one node, else between nodes
// Devices are in mesh order (data, pipeline, tensor; tensor rank fastest), so device d is on
// node d / devices_per_node, as the cluster places slots.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "schedule/plan.h"

namespace libai::schedule {

// One training layout.
struct ParallelChoice {
  int dp = 1, tp = 1, pp = 1;
  int64_t micro_batch_size = 1;
  int accumulation = 1;  // micro-batches per replica and step
  int zero_stage = 0;
  bool activation_checkpoint = false;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  int chunks = 1;  // model chunks per pipeline rank (interleaved only)
  // The layers split by the plan's balanced partition (train.dist.balance measured: the
  // stages' forward + backward times evened out over the devices' speeds, the fast devices
  // where the heavy stages go) rather than evenly by count (uniform). Only with pp > 1.
  bool balanced = false;
  int devices() const { return dp * tp * pp; }
  bool operator==(const ParallelChoice&) const = default;
};
// "dp 4 x tp 2 x pp 2, 8 micro-batches of 2, 1f1b, measured split, ZeRO-1, checkpointing".
std::string describe(const ParallelChoice& choice);

// What the user fixed (set members); the search varies the rest.
struct ParallelConstraints {
  std::optional<int> dp, tp, pp, zero_stage, chunks;
  std::optional<int64_t> micro_batch_size;
  std::optional<bool> activation_checkpoint, balanced;
  std::optional<PipelineSchedule> schedule;
};

struct SearchSpace {
  int devices = 1;           // all of the cluster's
  int devices_per_node = 1;  // tensor parallelism stays inside a node
  int num_layers = 1;        // pipeline layers
  int64_t global_batch = 1;  // samples per optimizer step, all replicas
  int64_t heads = 0;         // tensor parallelism divides it (0: no such limit)
  std::vector<int> zero_stages = {0, 1, 2, 3};
  std::vector<bool> checkpointing = {false, true};
  std::vector<PipelineSchedule> schedules = {PipelineSchedule::gpipe,
                                             PipelineSchedule::one_f_one_b,
                                             PipelineSchedule::interleaved};
  std::vector<int> interleave_chunks = {2, 4};
  std::vector<bool> balances = {false, true};  // uniform and measured splits (pp > 1)
  int64_t max_micro_batch_size = 0;  // 0: up to a replica's whole batch
  ParallelConstraints constraints;
};

// What a cost model predicts for one choice.
struct ParallelEstimate {
  double step_seconds = 0;  // one optimizer step
  double samples_per_second = 0;
  double memory_bytes = 0;  // on the fullest device
  double memory_cap = 0;    // that device's capacity (<= 0: unlimited)
  // The step's parts: the simulated pipeline (compute, tensor-parallel collectives, stage hops
  // and bubbles) and the data-parallel gradient exchange after it.
  double pipeline_seconds = 0, tensor_comm_seconds = 0, data_comm_seconds = 0;
  double bubble_fraction = 0;
  bool fits() const { return memory_cap <= 0 || memory_bytes <= memory_cap; }
};

struct RankedChoice {
  ParallelChoice choice;
  ParallelEstimate estimate;
};
struct RejectedChoice {
  ParallelChoice choice;
  std::string reason;  // "needs 9.1 GB on a device of 8.0 GB", or the planner's error
  ParallelEstimate estimate;
};

struct SearchResult {
  std::vector<RankedChoice> ranked;      // fit memory, fastest first
  std::vector<RejectedChoice> rejected;  // estimated but do not fit, or could not be planned
  std::vector<std::string> excluded;     // not estimated, by reason: "12 with tp 8: ..."
  int64_t evaluated = 0;
};

using EstimateFn = std::function<ParallelEstimate(const ParallelChoice&)>;

// Every choice of the space that divides and meets the constraints, in a fixed order (dp, tp,
// pp, micro-batch size, schedule, chunks, split, checkpointing, ZeRO stage). `excluded` gets
// one line per reason a whole class of choices was left out, with how many. InvalidArgument
// for a space that makes no sense (no devices, a batch of 0).
std::vector<ParallelChoice> enumerate_choices(const SearchSpace& space,
                                              std::vector<std::string>* excluded = nullptr);

// Estimates every choice of enumerate_choices and ranks those that fit by step time (ties: the
// lower ZeRO stage, no checkpointing, the uniform split, the larger micro-batch, less memory,
// then enumeration order). An estimate that throws an Error (a plan the planner
// refuses) is a rejection with its message. InvalidArgument, listing the exclusions, when no
// choice divides.
SearchResult search_parallel(const SearchSpace& space, const EstimateFn& estimate);

// ---------------------------------------------------------------------------------------------
// The training cost model (Note [Training cost model]).

struct LinkModel {
  double bandwidth_gbs = 0;  // <= 0: free
  double latency_seconds = 0;
  double seconds(double bytes) const;  // one message
};
// A ring all-reduce of `bytes` over `ranks` ranks: 2 (ranks - 1) / ranks of the bytes and
// 2 (ranks - 1) latencies; 0 for one rank.
double all_reduce_seconds(double bytes, int ranks, const LinkModel& link);

struct DeviceRates {
  double gflops = 0, gbs = 0;  // measured matrix-product and memory rates, > 0
  double memory_bytes = 0;     // available for training (<= 0: unlimited)
  // Seconds a layer's forward costs per micro-batch whatever its size (per-op overheads), on
  // top of its roofline; like the collectives, it does not shrink with tensor parallelism.
  double overhead_seconds = 0;
};

struct TrainCostModel {
  // Per layer, for one sample (a sequence): forward flops, parameters, bytes kept for backward,
  // and the hidden state it passes on (what checkpointing keeps and a stage hop sends).
  std::vector<double> layer_flops, layer_parameters, layer_activation_bytes, layer_output_bytes;
  // The embedding (on the first stage) looks up rows: it moves embedding_bytes per sample
  // rather than reading its table.
  double embedding_flops = 0, embedding_parameters = 0, embedding_bytes = 0;
  double head_flops = 0, head_parameters = 0;            // per sample; on the last stage
  double bytes_per_parameter = 4;  // read once per micro-batch (f32)
  int tensor_collectives = 2;      // all-reduces of a layer's output per forward
  double backward_factor = 2;      // backward / forward, without recomputation
  std::vector<DeviceRates> devices;  // every device of the cluster, mesh order
  int devices_per_node = 1;
  LinkModel intra_node, inter_node;
  int64_t global_batch = 1;
};

// The request compile_plan gets for `choice` (InvalidArgument when the choice does not match
// the model or the devices).
PlanRequest training_request(const TrainCostModel& model, const ParallelChoice& choice);
// What estimate_training may reuse from the choice before: the simulated step, when only the
// ZeRO stage differs and the split, the devices' order and the quotas came out the same (ZeRO
// changes memory, not the schedule's timeline). The search enumerates ZeRO stages innermost.
struct EstimateCache {
  ParallelChoice key;  // the choice with zero_stage 0
  StageAssignment stage_of;
  std::vector<int> slots, quota;
  Timeline timeline;
  bool valid = false;
};

// The choice's estimate; `plan` (optional) receives the compiled plan.
ParallelEstimate estimate_training(const TrainCostModel& model, const ParallelChoice& choice,
                                   Plan* plan = nullptr);
// The same, for the search: reuses and refills `cache`.
ParallelEstimate estimate_training(const TrainCostModel& model, const ParallelChoice& choice,
                                   EstimateCache& cache);

}  // namespace libai::schedule
