// Host entry points of the .cu kernels of ops/cuda/. They take raw device pointers (with the
// operands' offsets applied), runtime/dtype.h codes and collapsed strided layouts, so the
// .cu files need neither Tensor nor the dispatch machinery; the .cc files next to them turn
// tensors into these arguments and register the kernels into the ops' slots.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/cuda/strided_layout.h"

namespace libai::ops::cuda {

using libai::cuda::StridedLayout;

// out = a (op) b; layout strides: [0] out, [1] a, [2] b. op: ops::BinaryOp's value.
void launch_binary(int op, int dtype, void* out, const void* a, const void* b,
                   const StridedLayout<3>& layout, cudaStream_t stream);
// out = x * factor + offset; layout strides: [0] out, [1] x.
void launch_affine(int dtype, void* out, const void* x, double factor, double offset,
                   const StridedLayout<2>& layout, cudaStream_t stream);

// For each output j over `kept` (strides [0] x, [1] out), reduces x over `reduced`
// (strides [0] x): the sum, or the max with its position (the first on ties; NaN wins).
void launch_reduce_sum(int dtype, void* out, const void* x, const StridedLayout<2>& kept,
                       const StridedLayout<1>& reduced, cudaStream_t stream);
void launch_reduce_max(int dtype, void* values, int64_t* indices, const void* x,
                       const StridedLayout<2>& kept, const StridedLayout<1>& reduced,
                       cudaStream_t stream);

}  // namespace libai::ops::cuda

namespace libai::ops::cuda {

// Pointwise activations over n contiguous elements; op is ops::UnaryOp's value. The backward
// takes v = x, or the forward output y for the ops whose derivative reads it.
void launch_unary(int op, int dtype, double param, void* out, const void* x, int64_t n,
                  cudaStream_t stream);
void launch_unary_backward(int op, int dtype, double param, void* grad_in, const void* v,
                           const void* grad, int64_t n, cudaStream_t stream);

}  // namespace libai::ops::cuda

namespace libai::ops::cuda {

// Softmax over the last dim of a contiguous [rows_total, cols]; causal/padding as in
// ops::SoftmaxArgs (mask: contiguous one-byte [batch, cols], or null).
void launch_softmax_forward(int dtype, void* out, const void* x, int64_t rows_total, int64_t cols,
                            bool log, bool causal, int64_t rows, int64_t rows_per_batch,
                            const uint8_t* mask, cudaStream_t stream);
void launch_softmax_backward(int dtype, void* grad_in, const void* y, const void* grad,
                             int64_t rows_total, int64_t cols, bool log, cudaStream_t stream);

}  // namespace libai::ops::cuda

namespace libai::ops::cuda {

// Layer / RMS norm over contiguous [rows, hidden]; weight/bias [hidden] or null; mean and
// rstd: [rows] in the compute type (f32, f64 for f64). grad_weight/grad_bias may be null.
void launch_norm_forward(int dtype, bool layer, void* y, void* mean, void* rstd, const void* x,
                         const void* weight, const void* bias, int64_t rows, int64_t hidden,
                         double eps, cudaStream_t stream);
void launch_norm_backward(int dtype, bool layer, void* grad_x, void* grad_weight, void* grad_bias,
                          const void* x, const void* weight, const void* mean, const void* rstd,
                          const void* grad, int64_t rows, int64_t hidden, cudaStream_t stream);

}  // namespace libai::ops::cuda

namespace libai::ops::cuda {

// out [outer, k, inner] = x [outer, n, inner] at ids [k] (i64 or i32), moved by element size;
// the smallest position of an id outside [0, n) goes to *bad (which starts at ~0).
void launch_index_select(size_t element_size, void* out, const void* x, const void* ids,
                         bool ids_i64, int64_t outer, int64_t n, int64_t k, int64_t inner,
                         unsigned long long* bad, cudaStream_t stream);
// grad_x [outer, n, inner] += grad [outer, k, inner] scattered by ids, skipping skip_id;
// scratch: a zeroed f32 [outer, n, inner] for bf16/f16, unused (may be null) otherwise.
void launch_index_add(int dtype, void* grad_x, float* scratch, const void* grad, const void* ids,
                      bool ids_i64, int64_t skip_id, int64_t outer, int64_t n, int64_t k,
                      int64_t inner, cudaStream_t stream);

}  // namespace libai::ops::cuda

namespace libai::ops::cuda {

// out = cond ? a : b, moved by element size; strides: [0] out, [1] cond (one byte), [2] a,
// [3] b. false for an element size it does not cover.
bool launch_where(size_t element_size, void* out, const uint8_t* cond, const void* a, const void* b,
                  const StridedLayout<4>& layout, cudaStream_t stream);
// out = a (op) b; op: ops::CompareOp's value; dtype: any runtime/dtype.h code; strides:
// [0] out, [1] a, [2] b. false for a dtype it does not cover.
bool launch_compare(int op, int dtype, bool* out, const void* a, const void* b,
                    const StridedLayout<3>& layout, cudaStream_t stream);

}  // namespace libai::ops::cuda

namespace libai::ops::cuda {

// out[i] = uniform(key, i) >= p ? x[i] / (1 - p) : 0 over n contiguous elements, with the
// mask of runtime/rng.h (key = {seed, stream_key}).
void launch_dropout(int dtype, void* out, const void* x, int64_t n, double p, uint64_t seed,
                    uint64_t stream_key, cudaStream_t stream);

}  // namespace libai::ops::cuda

namespace libai::ops::cuda {

// Cross-entropy over contiguous logits [rows, classes] with i64 targets [rows]; losses and
// lse: [rows] in the compute type. words[0] += rows not ignored; words[1] = min(words[1],
// row of a target outside [0, classes) that is not ignore_index).
void launch_cross_entropy_forward(int dtype, void* losses, void* lse, const void* logits,
                                  const int64_t* target, int64_t rows, int64_t classes,
                                  int64_t ignore_index, double label_smoothing,
                                  unsigned long long* words, cudaStream_t stream);
// grad_out: [rows] when per_row, else one value; in the compute type.
void launch_cross_entropy_backward(int dtype, void* grad_logits, const void* logits,
                                   const int64_t* target, const void* lse, const void* grad_out,
                                   bool per_row, double scale, int64_t rows, int64_t classes,
                                   int64_t ignore_index, double label_smoothing,
                                   cudaStream_t stream);

}  // namespace libai::ops::cuda

namespace libai::ops::cuda {

// The k best entries of each x[o, :, i] (x [outer, n, inner] contiguous, any dtype code),
// sorted, ties to the lower index, NaN first for largest: values (may be null; x's dtype)
// and indices [outer, k, inner]. false for a dtype it does not cover. argmax is k = 1.
bool launch_topk(int dtype, void* values, int64_t* indices, const void* x, int64_t outer, int64_t n,
                 int64_t inner, int64_t k, bool largest, cudaStream_t stream);
// grad_x [outer, n, inner] (zero-filled) at indices = grad [outer, k, inner], by element size.
void launch_topk_backward(size_t element_size, void* grad_x, const void* grad,
                          const int64_t* indices, int64_t outer, int64_t k, int64_t inner,
                          int64_t n, cudaStream_t stream);

}  // namespace libai::ops::cuda

namespace libai::ops::cuda {

// Shapes and element strides of ops/attention.h's operands: q [batch, heads, q_len, d],
// k [.., kv_len, d], v [.., kv_len, dv], go (grad_out) [.., q_len, dv], mask [batch, kv_len],
// bias [batch, heads, q_len, kv_len] (stride 0 where broadcast).
struct AttentionLayout {
  int64_t batch = 0, heads = 0, q_len = 0, kv_len = 0, d = 0, dv = 0;
  int64_t q[4] = {}, k[4] = {}, v[4] = {}, go[4] = {}, mask[2] = {}, bias[4] = {};
  bool causal = false;
  double scale = 1.0;
};
// out [batch, heads, q_len, dv] and lse [batch, heads, q_len] contiguous; scores: a scratch
// of batch * heads * q_len * kv_len compute-type elements. mask and bias may be null.
void launch_attention_forward(int dtype, void* out, void* lse, void* scores, const void* q,
                              const void* k, const void* v, const uint8_t* mask, const void* bias,
                              const AttentionLayout& layout, cudaStream_t stream);
// dq, dk, dv contiguous like q, k, v; dbias contiguous [batch, heads, q_len, kv_len] or null;
// out contiguous; scratch: 2 * batch * heads * q_len * kv_len + batch * heads * q_len
// compute-type elements.
void launch_attention_backward(int dtype, void* dq, void* dk, void* dv, void* dbias, void* scratch,
                               const void* q, const void* k, const void* v, const void* out,
                               const void* grad_out, const void* lse, const uint8_t* mask,
                               const void* bias, const AttentionLayout& layout,
                               cudaStream_t stream);

}  // namespace libai::ops::cuda
