// Selection by condition, arg-max, top-k and comparisons.
//
//   Tensor causal = ops::lt(col_ids, row_ids);                  // bool, broadcast
//   Tensor s = ops::masked_fill(scores, causal, -1e9);          // mask broadcast to scores
//   Tensor y = ops::where(keep, x, ops::scale(x, 0.1));         // differentiable in x
//   Tensor next = ops::argmax(logits, -1);                      // i64, [batch]
//   auto [values, indices] = ops::topk(logits, 50);             // along the last dim
//
// Conditions and masks are bool or u8 (non-zero = true). where/masked_fill/topk are
// differentiable in their floating inputs; argmax, topk's indices and comparisons are not.
#pragma once

#include <cstdint>
#include <utility>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

// cond ? a : b elementwise; the three shapes broadcast together; a and b share one dtype.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` where mask is true; mask broadcasts to x's shape.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// Index (i64) of the first maximum along dim; NaN counts as the maximum.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// The k largest (or smallest) entries along dim and their i64 indices, sorted best first;
// ties go to the lower index. sorted = false allows any order (this build always sorts).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);

// Elementwise comparisons with broadcasting -> bool. Operands share one dtype.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

// cond (bool/u8), a, b already expanded to out's shape; a, b, out share one dtype.
LIBAI_KERNEL_SLOT(where_forward,
                  void(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out));
enum class CompareOp : uint8_t { eq, ne, lt, gt, le, ge };
// a, b expanded to out's shape (bool, contiguous).
LIBAI_KERNEL_SLOT(compare, void(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out));
// x [outer, n, inner] contiguous -> values, indices [outer, k, inner] contiguous.
LIBAI_KERNEL_SLOT(topk_forward,
                  void(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices));
// grad [outer, k, inner], indices [outer, k, inner] (distinct per row), grad_x
// [outer, n, inner] zero-filled: grad_x[o, indices[o, j, i], i] = grad[o, j, i].
LIBAI_KERNEL_SLOT(topk_backward, void(const Tensor& grad, const Tensor& indices, Tensor& grad_x));
// x [outer, n, inner] contiguous -> indices [outer, inner] i64.
LIBAI_KERNEL_SLOT(argmax_forward, void(const Tensor& x, Tensor& indices));

}  // namespace libai::ops
