// Dropout with a counter-based mask: element i of x (row-major index) is kept iff
// uniform(key, i) >= p, and kept values are scaled by 1 / (1 - p). The mask depends only
// on the key and the element index, so a layer derives its key from (seed, layer name,
// micro-batch) and gets the same mask on any device, thread count or recomputation; the
// backward pass regenerates the mask instead of storing it.
//
//   RngKey key = derive(RngKey{seed, stream_id("h.3.attn.dropout")}, micro_batch);
//   Tensor y = ops::dropout(x, 0.1, key, /*training=*/true);
//   ops::dropout(x, 0.1, key, false);   // returns x itself
//   // rank 1 of 2 holding heads [6, 12) of probabilities [batch, 12, q, k], samples from 8 on:
//   ops::dropout(probs, 0.1, key, true, {.starts = {8, 6, 0, 0}, .logical_shape = {0, 12, 0, 0}});
//
// Note [Dropout of a slice]: the slice overload numbers x's elements as the block they are of
// a larger logical tensor: element (i_0, ..., i_n) draws counter sum_d (i_d + starts[d]) *
// stride_d, the strides row-major over the logical sizes. A tensor-parallel shard, a
// micro-batch of a larger batch, or both, so draw exactly the mask of their block of the whole
// (the size of dim 0 never enters a row-major stride, so a batch's total need not be known).
#pragma once

#include <vector>

#include "ops/dispatch.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace libai::ops {

// p in [0, 1]; p == 1 gives zeros. Not training, or p == 0: x is returned unchanged.
Tensor dropout(const Tensor& x, double p, RngKey key, bool training = true);

// Where x lies in the logical tensor whose row-major index is the counter (Note [Dropout of a
// slice]). Empty: zeros / x's sizes; a logical size of 0 means x's size on that dim.
struct DropoutSlice {
  Shape starts;
  Shape logical_shape;
};
Tensor dropout(const Tensor& x, double p, RngKey key, bool training, const DropoutSlice& slice);

// The counter of x's element at multi-index i: base + sum_d i_d * strides[d].
struct DropoutCounter {
  uint64_t base = 0;
  std::vector<uint64_t> strides;  // one per dim of x
};

// out[i] = uniform(key, i) >= p ? x[i] / (1 - p) : 0, x and out contiguous.
LIBAI_KERNEL_SLOT(dropout_apply, void(const Tensor& x, double p, RngKey key, Tensor& out));
// The same with counters from DropoutCounter (x and out contiguous). A device without this
// kernel draws the mask on the host (see dropout.cc).
LIBAI_KERNEL_SLOT(dropout_apply_counter, void(const Tensor& x, double p, RngKey key,
                                              const DropoutCounter& counter, Tensor& out));

}  // namespace libai::ops
