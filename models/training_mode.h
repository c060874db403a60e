// What a forward pass is doing beyond inference, per thread: dropout on or off and the
// coordinates its counter RNG is keyed by, activation checkpointing, and the autocast dtype
// of mixed precision. The training step (train/) sets it around each micro-batch; layers read
// it. Thread-local, so SPMD ranks on threads and pipeline stages on their pinned threads each
// have their own. The default is inference: no dropout, no recomputation, f32 compute.
//
//   models::TrainingModeGuard guard({.training = true, .seed = 1234, .step = step,
//                                    .sample_offset = first_sample_of_this_micro_batch});
//   Tensor loss = train::compute_loss(model, batch).loss;
//
// Note [Dropout keyed by position]: a dropout mask element is drawn from the counter RNG at
// key (seed, stream of the layer's module path, step) and counter = the element's index in
// the logical tensor whose batch dim counts samples globally (sample_offset + row) and whose
// other dims are whole (a tensor-parallel shard adds its slice start). So a mask depends on
// neither the micro-batch split, the data-parallel rank, the tensor-parallel layout, nor on
// whether the layer is recomputed: bitwise the same everywhere.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace libai::models {

struct TrainingMode {
  bool training = false;            // dropout on
  uint64_t seed = 0;
  uint64_t step = 0;                // the optimizer step being computed
  int64_t sample_offset = 0;        // global index of this batch's first sample
  bool activation_checkpoint = false;  // transformer layers keep only their input
  DType autocast = DType::f32;      // bf16 / f16: matrix products compute in that dtype
};

// This thread's mode.
const TrainingMode& training_mode();

// Sets this thread's mode for a scope, restoring the previous one after.
class TrainingModeGuard {
 public:
  explicit TrainingModeGuard(const TrainingMode& mode);
  ~TrainingModeGuard();
  TrainingModeGuard(const TrainingModeGuard&) = delete;
  TrainingModeGuard& operator=(const TrainingModeGuard&) = delete;

 private:
  TrainingMode previous_;
};

}  // namespace libai::models
