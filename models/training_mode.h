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

class Module;

// Note [Parameters fetched around a layer]
// ZeRO-3 (train/zero.h) keeps only a shard of each layer's parameters between uses. Every
// family's transformer layer (models::TransformerLayer) asks the mode's fetcher for its
// parameters before its forward and frees them after; while recording, it also puts an
// identity node on its output whose backward fetches them again before the layer's own
// backward runs (the fetcher frees them once their gradients are reduced). A fetch is a
// collective of the data-parallel group, so every replica runs the same layers in the same
// order. Null: the parameters are always there.
class ParameterFetch {
 public:
  virtual ~ParameterFetch() = default;
  virtual void fetch(const Module& layer) = 0;
  virtual void release(const Module& layer) = 0;
};

struct TrainingMode {
  bool training = false;            // dropout on
  uint64_t seed = 0;
  uint64_t step = 0;                // the optimizer step being computed
  int64_t sample_offset = 0;        // global index of this batch's first sample
  bool activation_checkpoint = false;  // transformer layers keep only their input
  DType autocast = DType::f32;      // bf16 / f16: matrix products compute in that dtype
  ParameterFetch* fetch = nullptr;  // ZeRO-3: Note [Parameters fetched around a layer]
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
