// Balancing over the order of devices along the pipeline (Note [Balancing stages on mixed
// devices]): which device runs which stage is part of the answer when devices differ, since
// stage 0 holds the most activations under 1F1B and the embedding, the last stage the head.
//
//   DeviceCosts costs{.layer_time = {fast_row, slow_row, small_row}, .memory_cap = {...},
//                     .layer_memory = weights, .in_flight = {3, 2, 1}};
//   OrderedPartition best = balanced_partition_over_orders(costs);
//   best.order;                 // {0, 2, 1}: stage 1 runs on device 2
//   best.partition.stage_of;    // the layers' stages
#pragma once

#include <vector>

#include "schedule/partition.h"

namespace libai::schedule {

// As CostModel, but layer times, caps and the end stages' extras belong to devices (which
// stage a device runs is to be chosen), while activations in flight and extra memory belong to
// positions in the pipeline. As many stages as devices. Optional vectors may be empty.
struct DeviceCosts {
  std::vector<std::vector<double>> layer_time;  // [device][layer] seconds
  std::vector<double> memory_cap;               // [device] bytes, <= 0: unlimited
  std::vector<double> first_time, last_time;    // [device]: extra seconds on the first / last stage
  std::vector<double> layer_memory;             // [layer] bytes held once
  // Optional, when devices hold their weights in different precisions (Note [Precision per
  // pipeline stage] in plan.cc): [device][layer] bytes held once, instead of layer_memory;
  // [device] extra bytes on the first / last stage (the embedding, the head), beside
  // extra_memory.
  std::vector<std::vector<double>> device_layer_memory;
  std::vector<double> first_memory, last_memory;
  std::vector<double> layer_activation_memory;  // [layer] bytes per micro-batch in flight
  std::vector<double> in_flight;                // [stage] micro-batches in flight
  std::vector<double> extra_memory;             // [stage] bytes (embedding, head)
  std::vector<double> layer_unit_memory;        // [layer] bytes of its unit in flight (ZeRO)
  std::vector<double> extra_unit_memory;        // [stage] bytes of its rest's unit in flight
  int num_devices() const { return int(layer_time.size()); }
};

// The cost model of the stages when stage s runs on device order[s].
CostModel cost_model_for(const DeviceCosts& costs, const std::vector<int>& order);

struct OrderedPartition {
  std::vector<int> order;  // order[s]: the device of stage s
  Partition partition;
};

// The order and split with the smallest bottleneck within memory. Exact over every distinct
// order for up to 8 devices (devices with identical costs count once); beyond, the best of the
// given order and the devices sorted by speed, both ways. Ties keep the given order (0, 1, ...).
// Throws InvalidArgument when no order fits.
OrderedPartition balanced_partition_over_orders(const DeviceCosts& costs);

}  // namespace libai::schedule
