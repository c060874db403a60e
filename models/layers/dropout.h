// Dropout as a layer: on only while this thread's TrainingMode says training and p > 0, with
// the mask keyed by position (Note [Dropout keyed by position] in models/training_mode.h).
//
//   Dropout drop(0.1);                        // added under a parent: add_module("dropout", ...)
//   Tensor y = drop.forward(h);               // h [batch, ...]: rows count from sample_offset
//   // rank 1 of 2 holding heads [6, 12) of the probabilities [batch, 6, q, k]:
//   Tensor p = drop.forward(probs, {.dim = 1, .start = 6, .logical_size = 12});
//
// The key is derive({seed, stream_id(path())}, step): one stream per module path, so two
// dropout sites never share a mask, and a recomputed layer (activation checkpointing) draws
// the same one. Dim 0 is the batch: its index counts samples globally (the micro-batch's
// sample_offset is added), so data-parallel ranks and accumulation steps draw the slices of
// one logical batch's mask.
#pragma once

#include "models/module.h"

namespace libai::models {

// x's block of one dim of the logical tensor (a tensor-parallel shard): x holds indices
// [start, start + x.size(dim)) of logical_size. dim = -1: x is whole.
struct DropoutShard {
  int64_t dim = -1;
  int64_t start = 0;
  int64_t logical_size = 0;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x, const DropoutShard& shard = {}) const;
  double p() const { return p_; }
  // Whether forward changes anything now (this thread training and p > 0).
  bool active() const;

 private:
  double p_ = 0.0;
};

}  // namespace libai::models
