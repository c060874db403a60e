#include "ops/attention.h"

#include <cmath>

#include "ops/broadcast.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v) {
  LIBAI_CHECK(q.defined() && k.defined() && v.defined(), kOp, ": undefined q, k or v");
  check_same_device(q, k, kOp);
  check_same_device(q, v, kOp);
  check_same_dtype(q, k, kOp);
  check_same_dtype(q, v, kOp);
  LIBAI_CHECK(is_floating(q.dtype()), kOp, ": expected floating q, k, v, got ", q.dtype());
  LIBAI_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, kOp,
              ": expected q [batch, heads, q_len, d], k [batch, heads, kv_len, d] and v [batch, "
              "heads, kv_len, dv], got q ",
              shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  LIBAI_CHECK(q.size(0) == k.size(0) && q.size(0) == v.size(0) && q.size(1) == k.size(1) &&
                  q.size(1) == v.size(1) && q.size(3) == k.size(3) && k.size(2) == v.size(2),
              kOp, ": shapes disagree: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()),
              ", v ", shape_str(v.shape()),
              " (expected equal batch and heads, q and k the same d, k and v the same kv_len)");
}

AttentionParams resolve(const Tensor& q, const Tensor& k, const AttentionOptions& options) {
  const int64_t batch = q.size(0), heads = q.size(1), q_len = q.size(2), kv_len = k.size(2);
  AttentionParams p;
  p.causal = options.causal;
  p.scale =
      options.scale ? *options.scale : 1.0 / std::sqrt(double(std::max<int64_t>(q.size(3), 1)));
  if (options.key_padding_mask.defined()) {
    const Tensor& m = options.key_padding_mask;
    check_same_device(q, m, kOp);
    LIBAI_CHECK(m.dtype() == DType::boolean || m.dtype() == DType::u8, kOp,
                ": key_padding_mask must be bool or u8, got ", m.dtype());
    LIBAI_CHECK(m.dim() == 2 && m.size(0) == batch && m.size(1) == kv_len, kOp,
                ": key_padding_mask of shape ", shape_str(m.shape()),
                " does not match [batch, kv_len] = [", batch, ", ", kv_len, "]");
    p.key_padding_mask = m.detach();
  }
  if (options.attn_bias.defined()) {
    const Tensor& b = options.attn_bias;
    check_same_device(q, b, kOp);
    check_same_dtype(q, b, kOp);
    Shape full{batch, heads, q_len, kv_len};
    bool ok = b.dim() <= 4;
    for (int i = 0; ok && i < b.dim(); ++i) {
      int64_t want = full[size_t(4 - b.dim() + i)];
      ok = b.size(i) == want || b.size(i) == 1;
    }
    LIBAI_CHECK(ok, kOp, ": attn_bias of shape ", shape_str(b.shape()),
                " does not broadcast to [batch, heads, q_len, kv_len] = ", shape_str(full));
    p.bias = expand_view(b.detach(), full);
  }
  return p;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options) {
  check_inputs(q, k, v);
  AttentionParams params = resolve(q, k, options);
  const DType lse_dtype = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor out = Tensor::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({q.size(0), q.size(1), q.size(2)}, lse_dtype, q.device());
  kernel<attention_forward_slot>(q.device())(q, k, v, params, out, lse);

  const Tensor& bias = options.attn_bias;
  const bool want_bias = bias.defined() && (bias.requires_grad() || !bias.is_leaf());
  Shape bias_shape = bias.defined() ? bias.shape() : Shape{};
  Tensor qd = q.detach(), kd = k.detach(), vd = v.detach(), od = out.detach();
  return autograd::record(out, kOp, {q, k, v, bias},
                          [qd, kd, vd, od, lse, params, want_bias, bias_shape](const Tensor& g) {
                            Tensor dq = Tensor::empty(qd.shape(), qd.dtype(), qd.device());
                            Tensor dk = Tensor::empty(kd.shape(), kd.dtype(), kd.device());
                            Tensor dv = Tensor::empty(vd.shape(), vd.dtype(), vd.device());
                            Tensor dbias;
                            if (want_bias)
                              dbias = Tensor::empty(params.bias.shape(), qd.dtype(), qd.device());
                            kernel<attention_backward_slot>(qd.device())(qd, kd, vd, od, g, lse,
                                                                         params, dq, dk, dv, dbias);
                            if (want_bias) dbias = sum_to(dbias, bias_shape);
                            return std::vector<Tensor>{dq, dk, dv, dbias};
                          });
}

}  // namespace libai::ops
