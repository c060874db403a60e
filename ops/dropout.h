// Dropout with a counter-based mask: element i of x (row-major index) is kept iff
// uniform(key, i) >= p, and kept values are scaled by 1 / (1 - p). The mask depends only
// on the key and the element index, so a layer derives its key from (seed, layer name,
// micro-batch) and gets the same mask on any device, thread count or recomputation; the
// backward pass regenerates the mask instead of storing it.
//
//   RngKey key = derive(RngKey{seed, stream_id("h.3.attn.dropout")}, micro_batch);
//   Tensor y = ops::dropout(x, 0.1, key, /*training=*/true);
//   ops::dropout(x, 0.1, key, false);   // returns x itself
#pragma once

#include "ops/dispatch.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace libai::ops {

// p in [0, 1]; p == 1 gives zeros. Not training, or p == 0: x is returned unchanged.
Tensor dropout(const Tensor& x, double p, RngKey key, bool training = true);

// out[i] = uniform(key, i) >= p ? x[i] / (1 - p) : 0, x and out contiguous.
LIBAI_KERNEL_SLOT(dropout_apply, void(const Tensor& x, double p, RngKey key, Tensor& out));

}  // namespace libai::ops
