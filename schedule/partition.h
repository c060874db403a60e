// Partitioning a model's layers into contiguous pipeline stages (pure: no threads, no
// devices). Three policies, as in LiBai's `train.dist`:
//   uniform   LiBai's default: layers split as evenly as counts allow (earlier stages get
//             the remainder).
//   custom    the user's `custom_pipeline_stage_id`, validated (length, contiguity, range).
//   balanced  the contiguous split minimising the slowest stage's time, where each layer
//             has a measured cost on each device and every stage must fit its device's
//             memory. See Note [Balancing stages on mixed devices] in the design notes.
//
//   std::vector<int> stage_of = uniform_partition(12, 4);           // 0,0,0,1,1,1,...
//   CostModel cost{.layer_time = {{...}, {...}}, .layer_memory = ..., .memory_cap = ...};
//   Partition best = balanced_partition(cost);                        // exact, O(S L log)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace libai::schedule {

// stage_of[layer] = stage index, non-decreasing, every stage non-empty.
using StageAssignment = std::vector<int>;

StageAssignment uniform_partition(int num_layers, int num_stages);

// Validates a user-given assignment; throws InvalidArgument naming the offending position.
StageAssignment custom_partition(const std::vector<int64_t>& stage_ids, int num_layers,
                                 int num_stages);

// Costs are non-negative; the optional vectors may be empty (all zero).
//   time of stage s   = extra_time[s] + sum of layer_time[s][l] over its layers
//   memory of stage s = extra_memory[s] + sum of (layer_memory[l] (or stage_layer_memory[s][l])
//                                                 + in_flight[s] * layer_activation_memory[l])
//                       + max(extra_unit_memory[s], max of layer_unit_memory[l])
struct CostModel {
  // layer_time[s][l]: seconds for layer l on the device of stage s (per micro-batch).
  std::vector<std::vector<double>> layer_time;
  // layer_memory[l]: bytes that layer l needs on whichever device holds it.
  std::vector<double> layer_memory;
  // Optional, [s][l]: what layer l needs on the device of stage s instead, when stages hold
  // their weights in different precisions (Note [Precision per pipeline stage] in plan.cc).
  std::vector<std::vector<double>> stage_layer_memory;
  // memory_cap[s]: bytes available on the device of stage s (<= 0: unlimited).
  std::vector<double> memory_cap;
  // layer_activation_memory[l]: bytes layer l keeps per micro-batch in flight, and
  // in_flight[s]: micro-batches stage s keeps at once (1F1B: p - s).
  std::vector<double> layer_activation_memory;
  std::vector<double> in_flight;
  // Fixed costs of stage s whatever its layers: the embedding on stage 0, the head on the last.
  std::vector<double> extra_time;
  std::vector<double> extra_memory;
  // Bytes a stage holds for one unit at a time, the largest of its units (ZeRO-1's staging,
  // ZeRO-2's whole gradients, ZeRO-3's gathered parameters too; Note [ZeRO memory model] in
  // zero_memory.h): layer_unit_memory[l] for layer l, extra_unit_memory[s] for the rest of
  // stage s (the embedding, the head). The planner gives the rest a layer's rate an element,
  // an approximation: the model's ZeRO-2 and 3 hold the rest beside a layer (4 R + 8 U), which
  // one maximum cannot say; the plan it compiles is costed, and validated, by the model.
  std::vector<double> layer_unit_memory;
  std::vector<double> extra_unit_memory;
  int num_layers() const { return int(layer_memory.size()); }
  int num_stages() const { return int(layer_time.size()); }
};

struct Partition {
  StageAssignment stage_of;
  std::vector<double> stage_time;    // extras + its layers' times on its device
  std::vector<double> stage_memory;  // bytes
  double bottleneck = 0.0;           // max stage_time
};

// Evaluates an assignment under a cost model (no memory check).
Partition evaluate(const CostModel& cost, const StageAssignment& stage_of);

// The optimal contiguous partition (minimum bottleneck) subject to memory; stages keep the
// device order given. Throws InvalidArgument when no split fits, naming what the model needs.
Partition balanced_partition(const CostModel& cost);

// Whether some contiguous split keeps every stage's time <= `bottleneck` within memory.
// O(S L): what balanced_partition bisects on, and what a search over device orders uses to
// discard an order that cannot beat the best so far.
bool fits_within(const CostModel& cost, double bottleneck);

// Memory-proportional baseline (what llama.cpp RPC and exo do): layer counts in
// proportion to memory_cap. The balanced split is measured against it.
StageAssignment memory_proportional_partition(const CostModel& cost);

std::string describe(const StageAssignment& stage_of);

// "1.50 GiB" (binary units, for people's messages).
std::string format_bytes(double bytes);

}  // namespace libai::schedule
