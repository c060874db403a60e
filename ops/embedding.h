// Embedding lookup and index_select, differentiable w.r.t. the table.
//
//   Tensor wte = Tensor::empty({vocab, hidden});          // [V, H]
//   Tensor ids = Tensor::from_vector<int64_t>({5, 9, 2, 2}, {2, 2});
//   Tensor h = ops::embedding(wte, ids);                  // [2, 2, H]
//   Tensor p = ops::embedding(wte, ids, /*padding_idx=*/0); // row 0 gets no gradient
//   Tensor rows = ops::index_select(x, 0, keep);          // keep: 1-d i64/i32
//
// Ids are i64 or i32; an id outside [0, V) raises InvalidArgument naming the id, its position
// in `ids` and V (checked on the host for CPU ids; CUDA kernels check on the device).
// The backward adds rows of the output gradient into a zero [V, H] gradient; repeated ids
// accumulate, in a fixed order (ids are grouped first, so the sum is deterministic).
#pragma once

#include <cstdint>
#include <optional>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

// weight [V, H], ids [...] -> [..., H]. A negative padding_idx counts from V.
Tensor embedding(const Tensor& weight, const Tensor& ids,
                 std::optional<int64_t> padding_idx = std::nullopt);
// x with dim `dim` replaced by x's entries at `ids` (1-d); a copy.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& ids);

// x [outer, n, inner] contiguous, ids [k] contiguous (i64/i32, already in range),
// out [outer, k, inner] contiguous: out[o, j, :] = x[o, ids[j], :].
LIBAI_KERNEL_SLOT(index_select_forward, void(const Tensor& x, const Tensor& ids, Tensor& out));
// grad [outer, k, inner] contiguous, grad_x [outer, n, inner] zero-filled:
// grad_x[o, ids[j], :] += grad[o, j, :] for every j whose id is not skip_id (-1: none).
LIBAI_KERNEL_SLOT(index_add_backward,
                  void(const Tensor& grad, const Tensor& ids, int64_t skip_id, Tensor& grad_x));

}  // namespace libai::ops
