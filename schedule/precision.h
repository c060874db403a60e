// Precision per pipeline stage (pure: no threads, no devices): a pipeline slot's devices may
// hold their layers' weights in another precision than the others' (a small-memory node in
// 4-bit, a large one in f32), so each slot's weights cost their own bytes and its devices
// their own times. The caller prices the model once per precision, every slot in it (one
// PlanRequest each); a plan then takes, for each slot, the costs of its precision.
//
//   std::vector<PlanRequest> by_precision = {f32_request, bf16_request, q4_request};
//   PlanRequest mixed = mix_precisions(by_precision, {0, 0, 2});  // slot 2 in q4
//   Plan plan = compile_plan(mixed);
//   PrecisionChoice best = choose_precisions(by_precision);        // train.dist.stage_precision: auto
//   best.precision_of_slot;  // {0, 0, 2}: what fits giving up the least precision
//
// Note [Precision per pipeline stage]
// Precision belongs to a pipeline slot (its devices), not to a stage: the balanced policy
// chooses which slot runs which stage, and a slot keeps its precision wherever it runs. The
// bytes a slot's devices hold for a layer are its weights in the slot's precision (plus the KV
// cache, the same in every precision); the embedding and head likewise. The slot's layer times
// are its devices' at that precision (each device timed there). The balanced split over device
// orders stays exact with these costs: a slot's memory per layer is one more per-device row,
// like its times (partition.h stage_layer_memory, device_order.h device_layer_memory).
// choose_precisions, for `auto`: the requests are in order of preference (the most precise
// first), and a plan gives up, for each layer, the steps down that list of its slot's
// precision. Of every choice of precisions per slot whose plan fits memory, the one that gives
// up the fewest layer-steps (layers counted where its split puts them), then the one of the
// shortest predicted step, then the first in lexicographic order (earlier slots more
// precise). A small-memory node then takes a few 4-bit layers rather than a large one taking
// many, though quantizing the large one would be faster. Exhaustive: up to 4096 choices.
#pragma once

#include <vector>

#include "schedule/plan.h"

namespace libai::schedule {

// by_precision[p] prices every slot in precision p (same sizes, workload and policy);
// precision_of_slot[k] indexes it for pipeline slot k. The result takes, for the devices of
// slot k, their layer, decode, embedding and head times, and for slot k its layers', embedding
// and head bytes (slot_weight_bytes, ...), from by_precision[precision_of_slot[k]]; the rest
// from by_precision[0]. InvalidArgument for sizes that disagree or an index out of range.
PlanRequest mix_precisions(const std::vector<PlanRequest>& by_precision,
                           const std::vector<int>& precision_of_slot);

// Whether every device of the plan holds what its pipeline rank needs (validate's memory check).
bool fits_memory(const Plan& plan);
// Over the plan's layers, the index of their slot's precision.
int steps_given_up(const Plan& plan, const std::vector<int>& precision_of_slot);

struct PrecisionChoice {
  std::vector<int> precision_of_slot;  // [pipeline slot] index into by_precision
  Plan plan;                           // compile_plan of the mixed request
  int steps_given_up = 0;              // over its layers, their slot's index
};

// Note [Precision per pipeline stage]: the choice that fits giving up the fewest layer-steps,
// then the fastest. InvalidArgument when nothing fits even with every slot in the last
// precision (naming what the least precise plan needs), or for more than 4096 choices.
PrecisionChoice choose_precisions(const std::vector<PlanRequest>& by_precision);

}  // namespace libai::schedule
