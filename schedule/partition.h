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
//   Partition best = balanced_partition(cost);                        // exact, O(L^2 S)
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

struct CostModel {
  // layer_time[s][l]: seconds for layer l on the device of stage s (per micro-batch).
  std::vector<std::vector<double>> layer_time;
  // layer_memory[l]: bytes that layer l needs on whichever device holds it.
  std::vector<double> layer_memory;
  // memory_cap[s]: bytes available on the device of stage s (<= 0: unlimited).
  std::vector<double> memory_cap;
  int num_layers() const { return int(layer_memory.size()); }
  int num_stages() const { return int(layer_time.size()); }
};

struct Partition {
  StageAssignment stage_of;
  std::vector<double> stage_time;    // sum of its layers' times on its device
  std::vector<double> stage_memory;  // bytes
  double bottleneck = 0.0;           // max stage_time
};

// Evaluates an assignment under a cost model (no memory check).
Partition evaluate(const CostModel& cost, const StageAssignment& stage_of);

// The optimal contiguous partition (minimum bottleneck) subject to memory; stages keep the
// device order given. Throws InvalidArgument when no split fits, naming the tightest stage.
Partition balanced_partition(const CostModel& cost);

// Memory-proportional baseline (what llama.cpp RPC and exo do): layer counts in
// proportion to memory_cap. The balanced split is measured against it.
StageAssignment memory_proportional_partition(const CostModel& cost);

std::string describe(const StageAssignment& stage_of);

}  // namespace libai::schedule
