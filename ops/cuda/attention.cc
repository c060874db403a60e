// Registers the CUDA kernels of ops/attention.h (compute in ops/cuda/attention.cu, a plain
// version that materialises the scores in a scratch buffer).
#include "ops/attention.h"

#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"

namespace libai::ops::cuda {
namespace {

void strides4(const Tensor& t, int64_t* s) {
  for (int i = 0; i < 4; ++i) s[i] = t.strides()[i];
}

AttentionLayout layout_of(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionParams& p) {
  AttentionLayout L;
  L.batch = q.shape()[0];
  L.heads = q.shape()[1];
  L.q_len = q.shape()[2];
  L.kv_len = k.shape()[2];
  L.d = q.shape()[3];
  L.dv = v.shape()[3];
  strides4(q, L.q);
  strides4(k, L.k);
  strides4(v, L.v);
  if (p.key_padding_mask.defined()) {
    LIBAI_CHECK(p.key_padding_mask.element_size() == 1,
                "attention: key_padding_mask must be bool or u8, got ", p.key_padding_mask.dtype());
    L.mask[0] = p.key_padding_mask.strides()[0];
    L.mask[1] = p.key_padding_mask.strides()[1];
  }
  if (p.bias.defined()) strides4(p.bias, L.bias);
  L.causal = p.causal;
  L.scale = p.scale;
  return L;
}

const uint8_t* mask_of(const AttentionParams& p) {
  return p.key_padding_mask.defined() ? static_cast<const uint8_t*>(p.key_padding_mask.data_ptr())
                                      : nullptr;
}
const void* bias_of(const AttentionParams& p) {
  return p.bias.defined() ? p.bias.data_ptr() : nullptr;
}

void attention_forward_cuda(const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionParams& params, Tensor& out, Tensor& lse) {
  const int code = float_code(q.dtype(), "attention");
  const AttentionLayout L = layout_of(q, k, v, params);
  // [batch, heads, q_len, kv_len] scores, then probabilities, in lse's (compute) dtype.
  Tensor scores = Tensor::empty({L.batch * L.heads * L.q_len * L.kv_len}, lse.dtype(), q.device());
  OnDevice on(out);
  launch_attention_forward(code, out.data_ptr(), lse.data_ptr(), scores.data_ptr(), q.data_ptr(),
                           k.data_ptr(), v.data_ptr(), mask_of(params), bias_of(params), L,
                           on.stream);
  on.check_launch("attention kernel");
}

void attention_backward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& grad_out, const Tensor& lse,
                             const AttentionParams& params, Tensor& dq, Tensor& dk, Tensor& dv,
                             Tensor& dbias) {
  const int code = float_code(q.dtype(), "attention backward");
  LIBAI_ASSERT(out.is_contiguous(), "attention backward: out must be contiguous");
  AttentionLayout L = layout_of(q, k, v, params);
  strides4(grad_out, L.go);
  const int64_t rows = L.batch * L.heads * L.q_len;
  Tensor scratch = Tensor::empty({2 * rows * L.kv_len + rows}, lse.dtype(), q.device());
  OnDevice on(dq);
  launch_attention_backward(code, dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                            dbias.defined() ? dbias.data_ptr() : nullptr, scratch.data_ptr(),
                            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                            grad_out.data_ptr(), lse.data_ptr(), mask_of(params), bias_of(params),
                            L, on.stream);
  on.check_launch("attention backward kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(attention_forward, DeviceType::cuda, attention_forward_cuda);
LIBAI_REGISTER_KERNEL(attention_backward, DeviceType::cuda, attention_backward_cuda);

}  // namespace libai::ops::cuda
