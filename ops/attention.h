// Fused scaled dot-product attention, differentiable:
//   out = softmax(scale · q kᵀ + attn_bias + masks) v
// computed over key tiles with an online softmax (FlashAttention), so the q_len x kv_len
// score matrix is never materialised; the backward recomputes the scores per tile from
// q, k, v and the saved per-row logsumexp (FlashAttention-2).
//
//   ops::AttentionOptions opt;
//   opt.causal = true;                             // query i sees keys j <= i + (kv_len - q_len)
//   opt.key_padding_mask = mask;                   // [batch, kv_len] bool or u8, 1 = keep
//   opt.attn_bias = t5_bias;                       // broadcastable to [batch, heads, q_len,
//   kv_len] Tensor out = ops::scaled_dot_product_attention(q, k, v, opt);
//   // q [batch, heads, q_len, d], k [batch, heads, kv_len, d], v [batch, heads, kv_len, dv]
//   // -> out [batch, heads, q_len, dv]
//
// kv_len may differ from q_len (a KV cache: the causal diagonal then aligns the last query
// with the last key). A query row whose keys are all masked has no softmax; its output,
// and every gradient through it, is zero (never NaN). bf16 and f16 inputs accumulate in f32.
#pragma once

#include <optional>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

struct AttentionOptions {
  bool causal = false;
  Tensor key_padding_mask;      // [batch, kv_len], bool or u8; 1 = attend, 0 = masked; optional
  std::optional<double> scale;  // default 1 / sqrt(d)
  Tensor attn_bias;             // additive, same dtype as q, broadcastable; optional
};

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

// What the kernels receive: the resolved scale, the mask as given, and the bias expanded
// (a stride-0 view) to [batch, heads, q_len, kv_len].
struct AttentionParams {
  bool causal = false;
  double scale = 1.0;
  Tensor key_padding_mask;
  Tensor bias;
};

// out: contiguous [batch, heads, q_len, dv] of q's dtype; lse: contiguous [batch, heads, q_len]
// in the compute type (f64 for f64, else f32), +inf for fully masked rows.
LIBAI_KERNEL_SLOT(attention_forward, void(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionParams& params, Tensor& out, Tensor& lse));
// dq, dk, dv: contiguous, shaped and typed like q, k, v; dbias: contiguous
// [batch, heads, q_len, kv_len] of q's dtype, or undefined when not wanted.
LIBAI_KERNEL_SLOT(attention_backward,
                  void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& grad_out, const Tensor& lse, const AttentionParams& params,
                       Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias));

}  // namespace libai::ops
