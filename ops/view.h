// Views, reshapes, slicing and concatenation, differentiable.
//
// Views share the input's storage (no copy): view, permute, transpose, unsqueeze, squeeze,
// expand, slice, narrow, select, split and chunk always do; reshape and flatten do when the
// strides allow and copy otherwise; contiguous copies only a non-contiguous input; cat always
// allocates.
//
//   Tensor x = ops::reshape(qkv, {b, s, 3, heads, -1});   // -1 inferred
//   Tensor q = ops::select(x, 2, 0);                       // [b, s, heads, head_dim], a view
//   Tensor t = ops::transpose(q, 1, 2);                    // [b, heads, s, head_dim], a view
//   Tensor c = ops::contiguous(t);                         // copies (t is not contiguous)
//   Tensor last = ops::slice(h, 1, -1, INT64_MAX);         // h[:, -1:]
//   auto parts = ops::split(w, 768, -1);                   // views of 768 columns each
//   Tensor y = ops::cat({a, b}, 0);
//
// Gradients returned by the backward of these ops are contiguous, so downstream backward
// kernels never see stride-0 or permuted gradients.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

// Any number of elements; one entry may be -1 (inferred). Views when strides allow.
Tensor reshape(const Tensor& x, Shape shape);
// Like reshape but never copies: InvalidArgument when x's strides do not allow the view.
Tensor view(const Tensor& x, Shape shape);
// Output dim i is input dim dims[i]; dims is a permutation (negative entries allowed).
Tensor permute(const Tensor& x, std::vector<int64_t> dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
// Inserts a size-1 dim at `dim` in [-(rank + 1), rank].
Tensor unsqueeze(const Tensor& x, int64_t dim);
// Removes every size-1 dim; the one-dim form leaves x unchanged when that dim is not 1.
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
// Merges dims [start_dim, end_dim] into one (reshape semantics).
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
// Broadcasts size-1 dims (and new leading dims) to `shape`; -1 keeps a dim. Stride-0 view.
Tensor expand(const Tensor& x, Shape shape);
// x itself when contiguous, else a contiguous copy.
Tensor contiguous(const Tensor& x);

// x[..., start:end:step, ...] along `dim`, with Python's rules: negative start/end count from
// the end, out-of-range bounds clamp, an empty range gives size 0. step must be positive.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// `length` elements from `start` (negative counts from the end); must lie within the dim.
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// Removes `dim`, keeping entry `index` (negative counts from the end).
Tensor select(const Tensor& x, int64_t dim, int64_t index);

// Joins tensors of one dtype/device whose shapes agree except along `dim`.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of `size` elements along dim (the last may be shorter).
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim = 0);
// Views of the given sizes, which must sum to the dim's size.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// `chunks` views of ceil(size / chunks) elements (fewer when the dim is too short), like torch.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// The strides that view `shape` of `old_shape`/`old_strides` without copying, or an empty
// vector with ok = false when the layout does not allow it.
Shape view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape, bool& ok);

// dst[i] = src[i] for every index; same shape and dtype, any strides (dst must not overlap
// itself or src). Backends take a fast path for contiguous rows.
LIBAI_KERNEL_SLOT(copy_strided, void(const Tensor& src, Tensor& dst));

}  // namespace libai::ops
