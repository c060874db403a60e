// Compiling a pipeline plan (pure: no threads, no devices). From per-layer costs on each
// device, the devices' memory and the parallel sizes, to: the stage of each layer, the
// devices of each stage (the order of devices along the pipeline is part of the answer, see
// Note [Balancing stages on mixed devices]), each stage's time and memory, the programs and
// their buffer quotas, and the predicted timeline, throughput and utilisation.
//
//   PlanRequest request{.pp = 4, .layer_time = times,          // [device][layer] seconds
//                       .memory_cap = caps, .weight_bytes = weights,
//                       .num_micro_batches = 8, .balance = Balance::balanced};
//   Plan plan = compile_plan(request);
//   validate(plan);             // memory fits, no deadlock, sizes consistent; else one clear error
//   plan.stages[1].devices;     // {2}: device 2 runs stage 1
//   render_timeline(plan.timeline, plan.pp);
//
// Devices are ordered as the mesh [dp, pp, tp], tensor rank fastest: device (d * pp + k) *
// tp + t is tensor rank t of pipeline slot k in replica d. A stage runs on one slot's devices
// (dp * tp of them) and every replica uses the same split. Costs are given per whole layer on
// one device; a stage with tensor parallelism takes 1/tp of the time (communication not
// modelled) and 1/tp of the memory on each of its devices.
// Callers convert model flops and bytes and device profiles into seconds with
// layer_time_from_profile(), so every caller computes times the same way.
//
// Training runs the request's schedule (GPipe, 1F1B or interleaved 1F1B) and its stages hold
// the activations that schedule stashes at its peak (peak_stashed_bytes of the program), so the
// partition balances forward + backward time against the schedule's memory. Interleaved 1F1B
// with v chunks cuts the layers into pp * v contiguous virtual stages, uniformly for now (the
// balanced split over chunks is not implemented); chunk c of pipeline rank r is virtual stage
// c * pp + r (Note [Virtual stages] in program.h), and `stages` then lists the virtual stages.
//
// A training request may give each layer's parameter count (layer_parameters, and the
// embedding's and head's): each device then holds its rank's model state by ZeRO's memory model
// at zero_stage over the dp replicas (zero_memory.h: parameters, gradients, AdamW's moments and
// the largest unit in flight), which the balanced policy fits into memory like the rest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/partition.h"
#include "schedule/program.h"
#include "schedule/zero_memory.h"

namespace libai::schedule {

// Roofline time of a layer on a device: max(flops / rate, bytes / bandwidth), in seconds.
// `gflops` in GFLOP/s, `gbs` in GB/s (1e9 bytes per second), both > 0.
double layer_time_from_profile(double flops, double bytes, double gflops, double gbs);

enum class Workload {
  train,      // the schedule over num_micro_batches, backward = backward_factor x forward
  inference,  // one forward per micro-batch (encoding)
  decode,     // num_micro_batches groups of sequences, num_steps steps each (generation)
};
enum class Balance {
  uniform,   // LiBai's: layers as evenly as counts allow, devices in the given order
  custom,    // custom_stage_ids, devices in the given order
  balanced,  // minimum bottleneck within memory, over device orders
  memory,    // layers in proportion to memory (the baseline), devices in the given order
};

// Training programs (program.h): all forwards then all backwards; Megatron's 1F1B; 1F1B
// interleaved over num_chunks virtual stages per pipeline rank.
enum class PipelineSchedule { gpipe, one_f_one_b, interleaved };

const char* workload_name(Workload workload);  // "train", "inference", "decode"
const char* balance_name(Balance balance);     // "uniform", "custom", "balanced", "memory"
// "gpipe", "1f1b", "interleaved": the names of train.dist.pipeline_schedule.
const char* schedule_name(PipelineSchedule schedule);
// The schedule of a config name; InvalidArgument naming `key` and the choices otherwise.
PipelineSchedule parse_schedule(const std::string& name,
                                const std::string& key = "train.dist.pipeline_schedule");

// A fixed part of the first or the last stage (the embedding, the head).
struct StageExtra {
  std::vector<double> time;         // [device] forward seconds per micro-batch; empty: none
  std::vector<double> decode_time;  // [device] per decoding step; empty: as `time`
  double bytes = 0;                 // held once, like weight_bytes
  double parameters = 0;            // training: its parameter count, like layer_parameters
};

struct PlanRequest {
  int dp = 1, pp = 1, tp = 1;
  // Per device (dp * pp * tp of them, mesh order), per layer: forward seconds per
  // micro-batch (decoding: the prefill of a group).
  std::vector<std::vector<double>> layer_time;
  // Decoding: seconds per step after the first (one token per sequence); empty: layer_time.
  std::vector<std::vector<double>> layer_decode_time;
  // Per device: bytes available (<= 0: unlimited); empty: all unlimited.
  std::vector<double> memory_cap;
  // Per layer: bytes held once (weights; in training also gradients and optimizer state,
  // unless layer_parameters gives the model state).
  std::vector<double> weight_bytes;
  // Training, per layer, optional: its parameter count (the whole layer's, before tp). Each
  // device then also holds its rank's model state (f32 parameters, gradients, AdamW's m and v)
  // by Note [ZeRO memory model] at zero_stage (0-3) over the dp data-parallel ranks; a unit is
  // a layer, or the embedding or head of a (virtual) stage.
  std::vector<double> layer_parameters;
  int zero_stage = 0;
  // The data-parallel ranks ZeRO shards over (0: dp). A plan of one replica that stands for
  // several (auto parallel's search, Note [One replica stands for all]) sets the real count.
  int zero_replicas = 0;
  int zero_ranks() const { return zero_replicas > 0 ? zero_replicas : dp; }
  // false: the plan without its step simulated (timeline, throughput and utilisation left
  // empty), for a caller that already has the timeline of the same program and costs.
  bool simulate = true;
  // Per layer, optional: bytes kept per micro-batch until its backward (training only).
  std::vector<double> activation_bytes;
  // Per layer, optional: KV-cache bytes per group for the whole generation (decoding only;
  // every group's cache stays on every stage).
  std::vector<double> kv_cache_bytes;
  StageExtra embedding, head;  // on the first and on the last stage
  // Precision per pipeline slot, optional (decoding and inference; Note [Precision per pipeline
  // stage] in precision.h): [slot][layer] the weight bytes a pipeline slot's devices hold, and
  // [slot] the embedding's and the head's, in place of weight_bytes, embedding.bytes and
  // head.bytes (times are per device already). Empty: those, on every slot.
  std::vector<std::vector<double>> slot_weight_bytes;
  std::vector<double> slot_embedding_bytes, slot_head_bytes;

  Workload workload = Workload::train;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  // training only
  int num_chunks = 1;         // interleaved: virtual stages per pipeline rank (> 1 only there)
  int num_micro_batches = 1;  // per replica: micro-batches, or groups when decoding
  int num_steps = 1;          // decoding: steps per group, the first being the prefill
  double items_per_micro_batch = 1;  // sequences per micro-batch or group (throughput)
  double backward_factor = 2.0;      // training: backward seconds per forward second
  double transfer_time = 0;          // seconds per activation hop between stages
  double sample_time = 0;            // decoding: last stage output -> next token at stage 0

  Balance balance = Balance::uniform;
  std::vector<int64_t> custom_stage_ids;  // Balance::custom: the stage of each layer
};

// A pipeline stage (a virtual stage in an interleaved plan: a chunk of its rank's devices).
struct StagePlan {
  int first_layer = 0, last_layer = 0;  // inclusive
  int slot = 0;                         // the mesh's pipeline slot whose devices run it
  std::vector<int> devices;             // dp * tp of them: replica-major, then tensor rank
  double forward_time = 0;              // seconds per micro-batch (with its extras, / tp)
  double decode_time = 0;               // seconds per decoding step after the first
  // Bytes on each of its devices (activations: what this stage alone stashes at its peak;
  // model state: of this stage alone, its largest layer and its rest in flight).
  double weight_bytes = 0, kv_cache_bytes = 0, activation_bytes = 0;
  double parameters = 0;  // on each of its devices (/ tp), with the embedding or head
  ZeroMemory model_state;
  double memory() const {
    return weight_bytes + model_state.total() + kv_cache_bytes + activation_bytes;
  }
  int input_slots = 0;  // its input buffer quota
  int num_layers() const { return last_layer - first_layer + 1; }
};

// Bytes on each device of a pipeline rank: the weights of all its chunks, their model state
// (in flight: its largest layer and its largest rest over all its chunks, one chunk's units at
// a time) and the activations its program stashes at its peak (the chunks' peaks need not
// coincide).
struct RankMemory {
  double weight_bytes = 0, kv_cache_bytes = 0, activation_bytes = 0;
  double parameters = 0;     // Psi of Note [ZeRO memory model]: on each device
  double largest_unit = 0;   // elements of its largest unit on each device: max(U, R)
  double largest_layer = 0;  // U: of its largest transformer layer, over its chunks
  double rest_unit = 0;      // R: of its largest part-level unit (embeddings, final norm, head),
                             // over its chunks (each chunk's rest is a unit of its own)
  ZeroMemory model_state;    // by the plan's zero_stage over its dp
  double total() const {
    return weight_bytes + model_state.total() + kv_cache_bytes + activation_bytes;
  }
};

struct Plan {
  int dp = 1, pp = 1, tp = 1, num_layers = 0;
  int num_chunks = 1;  // virtual stages per pipeline rank (interleaved); stages: pp * num_chunks
  Workload workload = Workload::train;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  // training
  Balance balance = Balance::uniform;
  int zero_stage = 0;                   // training: the model state's ZeRO stage
  int zero_ranks = 1;  // over this many data-parallel ranks (dp, or the request's zero_replicas)
  std::vector<double> memory_cap;       // [device] bytes, <= 0: unlimited
  StageAssignment stage_of;             // [layer] (virtual) stage
  std::vector<StagePlan> stages;        // by (virtual) stage: rank k % pp, chunk k / pp
  std::vector<RankMemory> rank_memory;  // [pipeline rank]
  PipelineProgram program;              // one replica's, one program per pipeline rank
  std::vector<int> quota;               // input slots per (virtual) stage (buffer_quota(program))
  StageCosts costs;
  Timeline timeline;          // one step of one replica (rows: pipeline ranks)
  double items_per_step = 0;  // all replicas: sequences (train, inference) or tokens
  double throughput = 0;      // items per second
  double utilisation = 0;     // mean over stages of the busy fraction
};

// Builds the plan. Throws InvalidArgument for inconsistent input (sizes, custom ids, negative
// costs) or, for Balance::balanced, when no split fits the devices' memory in any order.
// Does not check memory for the other policies: validate() does, so a caller can show a plan
// that does not fit and say why.
Plan compile_plan(const PlanRequest& request);

// Checks a plan before it runs: sizes consistent (dp * pp * tp devices, every device used
// by one pipeline rank, pp * chunks <= layers, a contiguous split), every device's memory
// (naming the stage or rank, device, needed and available bytes), and the program replayed
// with its quotas (no deadlock).
void validate(const Plan& plan);

}  // namespace libai::schedule
