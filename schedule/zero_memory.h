// ZeRO's model-state memory per rank (pure): what the f32 parameters, gradients and AdamW's two
// moments of one pipeline rank take on each of its devices when ZeRO stage 0-3 shards them over
// the rank's data-parallel group. The planner costs training with it (plan.h), `libai-actor
// plan` prints its terms, and train/zero.h's zero_state_bytes is the same model.
//
//   ZeroMemory m = zero_state_bytes(/*stage=*/2, /*dp=*/4, /*params=*/1e9, /*layer=*/5e7,
//                                   /*rest=*/4e7);
//   m.total();   // 4e9 + 12e9 / 4 + 4 x 4e7 + 8 x 5e7 bytes
//
// Note [ZeRO memory model]
// Psi is the rank's parameter count on one device (its pipeline stage's parameters, divided by
// tp), N the data-parallel size, U the element count of its largest transformer layer and R
// that of the rest of its part (embeddings, final norm, head): the units of Note [ZeRO
// partitions] in train/zero.h. All in f32, AdamW:
//   stage  parameters  gradients         optimizer  in flight
//   0      4 Psi       4 Psi             8 Psi      4 Psi when N > 1 (the all-reduce buckets)
//   1      4 Psi       4 Psi + 4 Psi/N   8 Psi/N    4 max(U, R)
//   2      4 Psi       4 Psi/N           8 Psi/N    max(4 R + 8 U, 8 R)
//   3      4 Psi/N     4 Psi/N           8 Psi/N    max(8 R + 12 U, 12 R)
// Stage 1 keeps the whole gradients until the step and then the owned shard; the optimizer
// state is m and v of the owned shard. In flight: ZeRO-0's data-parallel buckets are a copy of
// every gradient; stage 1 stages one unit for its reduce-scatter; during stage 2's backward the
// rest's whole gradients live from its head (first) to its embedding (last) beside one layer's
// whole gradients and their staging (or, at the end, the rest's own staging); stage 3 also
// holds what is gathered: the rest throughout backward and one layer. The activations a
// schedule stashes come on top. bench/zero_memory.cc measures the peak of every term together
// against these (bench/RESULTS.md, "ZeRO").
// The balanced split (partition.h) adds the in-flight term of one unit per stage (the largest
// of its layers and its rest, at a layer's rate), so ZeRO's savings let a stage take more
// layers. At N = 1 every shard is whole and ZeRO saves nothing (stage 1 keeps its gradient
// shard beside the whole gradients). The implementation pads each unit to a multiple of N; the
// model ignores the padding (fewer than N elements a unit).
#pragma once

#include <string>

namespace libai::schedule {

// Bytes on one device, by term.
struct ZeroMemory {
  double parameters = 0, gradients = 0, optimizer = 0, in_flight = 0;
  double total() const { return parameters + gradients + optimizer + in_flight; }
  ZeroMemory& operator+=(const ZeroMemory& other);
};

// The model state of Note [ZeRO memory model]: `params` parameters on the device (Psi), its
// largest layer's (U) and its rest's (R) elements. InvalidArgument for a stage outside 0-3,
// dp < 1 or a negative count.
ZeroMemory zero_state_bytes(int stage, int dp, double params, double largest_layer = 0,
                            double rest = 0);

// "ZeRO-2 over dp 4" (stage 0: "no ZeRO").
std::string zero_description(int stage, int dp);

}  // namespace libai::schedule
