// ZeRO's model-state memory per rank (pure): what the f32 parameters, gradients and AdamW's two
// moments of one pipeline rank take on each of its devices when ZeRO stage 0-3 shards them over
// the rank's data-parallel group. The planner costs training with it (plan.h), `libai-actor
// plan` prints its terms, and train/zero.h's zero_state_bytes is the same model.
//
//   ZeroMemory m = zero_state_bytes(/*stage=*/2, /*dp=*/4, /*params=*/1e9, /*largest_unit=*/5e7);
//   m.total();   // 4e9 + 12e9 / 4 + 4 x 5e7 bytes
//
// Note [ZeRO memory model]
// Psi is the rank's parameter count on one device (its pipeline stage's parameters, divided by
// tp), N the data-parallel size, U the element count of the rank's largest unit (one
// transformer layer, or the rest of a model part: embeddings, final norm, head; Note [ZeRO
// partitions] in train/zero.h). All in f32, AdamW:
//   stage  parameters  gradients         optimizer  in flight  total
//   0      4 Psi       4 Psi             8 Psi      -          16 Psi
//   1      4 Psi       4 Psi + 4 Psi/N   8 Psi/N    -          8 Psi + 12 Psi/N
//   2      4 Psi       4 Psi/N           8 Psi/N    4 U        4 Psi + 12 Psi/N + 4 U
//   3      4 Psi/N     4 Psi/N           8 Psi/N    8 U        16 Psi/N + 8 U
// Stage 1 keeps the whole gradients until the step and then the owned shard; the optimizer
// state is m and v of the owned shard. In flight: stage 2 holds one unit's whole gradients
// before their reduce-scatter, stage 3 also its gathered parameters.
// Every term is linear in Psi except the unit in flight, which is the largest of the rank's
// units: the balanced split (partition.h) adds it as a maximum over the stage's layers and its
// rest, so ZeRO's savings let a stage take more layers. At N = 1 every shard is whole and ZeRO
// saves nothing (the formulas give 16 Psi or more: stage 1 keeps its gradient shard beside the
// whole gradients). The implementation pads each unit to a multiple of N; the model ignores the
// padding (fewer than N elements a unit).
#pragma once

#include <string>

namespace libai::schedule {

// Bytes on one device, by term.
struct ZeroMemory {
  double parameters = 0, gradients = 0, optimizer = 0, in_flight = 0;
  double total() const { return parameters + gradients + optimizer + in_flight; }
  ZeroMemory& operator+=(const ZeroMemory& other);
};

// The model state of Note [ZeRO memory model]: `params` parameters on the device (Psi),
// `largest_unit` elements in its largest unit (0: leave out what is in flight). InvalidArgument
// for a stage outside 0-3, dp < 1 or a negative count.
ZeroMemory zero_state_bytes(int stage, int dp, double params, double largest_unit = 0);

// "ZeRO-2 over dp 4" (stage 0: "no ZeRO").
std::string zero_description(int stage, int dp);

}  // namespace libai::schedule
