// Softmax and log-softmax along one dim, with the attention masks, differentiable.
//
//   Tensor p = ops::softmax(scores);                                  // over the last dim
//   Tensor a = ops::softmax(scores, -1, {.causal = true});            // [b, heads, q, k]
//   Tensor m = ops::softmax(scores, -1, {.key_padding_mask = pad});   // pad: [b, k]
//   Tensor l = ops::log_softmax(logits);
//
// Masks apply to the last two dims [..., rows, cols] and need dim == -1:
//  - causal: row i keeps the columns j <= i + (cols - rows) (a query block at the end of a
//    longer key sequence, as with a KV cache);
//  - key_padding_mask: [batch, cols] of bool/u8/i32/i64, batch = x.shape[0], broadcast over
//    the middle dims; nonzero marks a padded key, which is masked out (PyTorch's convention;
//    Hugging Face's attention_mask is its negation).
// Masked entries give 0 (softmax) or -inf (log_softmax); a fully masked row gives zeros
// (softmax) or all -inf (log_softmax), never NaN, and no gradient. Another dim than the
// last is handled by a transposed copy. f32/bf16/f16 compute in f32, f64 in f64.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

struct SoftmaxMask {
  bool causal = false;
  Tensor key_padding_mask = {};  // [batch, cols]; nonzero = masked out
};

Tensor softmax(const Tensor& x, int64_t dim = -1, const SoftmaxMask& mask = {});
Tensor log_softmax(const Tensor& x, int64_t dim = -1, const SoftmaxMask& mask = {});

// What the kernels see: x contiguous [outer, cols] with the reduction over cols.
struct SoftmaxArgs {
  bool log = false;
  bool causal = false;
  int64_t rows = 1;            // size of dim -2: row r is row (r % rows) of its matrix
  int64_t rows_per_batch = 1;  // row r belongs to batch r / rows_per_batch
  Tensor key_padding_mask;     // bool or u8 contiguous [batch, cols], or undefined
};
LIBAI_KERNEL_SLOT(softmax_forward, void(const Tensor& x, const SoftmaxArgs& args, Tensor& out));
// grad_in = y * (grad - sum(grad * y)), or for log: grad - e^y * sum(grad) over entries with
// y > -inf (masked entries get 0). All contiguous with the reduction over the last dim.
LIBAI_KERNEL_SLOT(softmax_backward,
                  void(const Tensor& y, const Tensor& grad, bool log, Tensor& grad_in));

}  // namespace libai::ops
