#include "ops/norm.h"

#include "runtime/autograd.h"

namespace libai::ops {
namespace {

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : t.clone_raw(); }

void check_param(const Tensor& x, const Tensor& p, const char* what, const char* op) {
  if (!p.defined()) return;
  const int64_t hidden = x.shape().back();
  LIBAI_CHECK(p.dim() == 1 && p.shape()[0] == hidden, op, ": ", what, " of shape ",
              shape_str(p.shape()), " does not match input ", shape_str(x.shape()), "; expected [",
              hidden, "]");
  LIBAI_CHECK(p.dtype() == x.dtype(), op, ": ", what, " has dtype ", p.dtype(), " but input has ",
              x.dtype());
  LIBAI_CHECK(p.device() == x.device(), op, ": ", what, " on ", p.device(), " but input on ",
              x.device());
}

Tensor norm(NormKind kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
            const char* op) {
  LIBAI_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", x.dtype(),
              " of shape ", shape_str(x.shape()));
  LIBAI_CHECK(x.dim() >= 1 && x.shape().back() > 0, op,
              ": expected an input [..., hidden] with hidden > 0, got shape ",
              shape_str(x.shape()));
  LIBAI_CHECK(eps >= 0, op, ": eps must be >= 0, got ", eps);
  check_param(x, weight, "weight", op);
  check_param(x, bias, "bias", op);
  const int64_t hidden = x.shape().back(), rows = x.numel() / hidden;
  const DType stat_dtype = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor input = contiguous(x);
  Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  Tensor b = bias.defined() ? contiguous(bias) : Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({rows}, stat_dtype, x.device());
  Tensor rstd = Tensor::empty({rows}, stat_dtype, x.device());
  kernel<norm_forward_slot>(x.device())(kind, input, w, b, eps, y, mean, rstd);
  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::needs_grad(inputs)) return y;
  Tensor xd = input.detach(), wd = w.defined() ? w.detach() : Tensor();
  const bool has_bias = b.defined();
  return autograd::record(y, op, inputs, [=](const Tensor& g) {
    Tensor grad = contiguous(g);
    Tensor grad_x = Tensor::empty(xd.shape(), xd.dtype(), xd.device());
    Tensor grad_w = wd.defined() ? Tensor::empty(wd.shape(), wd.dtype(), wd.device()) : Tensor();
    Tensor grad_b = has_bias ? Tensor::empty(wd.defined() ? wd.shape() : Shape{xd.shape().back()},
                                             xd.dtype(), xd.device())
                             : Tensor();
    kernel<norm_backward_slot>(grad.device())(kind, xd, wd, mean, rstd, grad, grad_x, grad_w,
                                              grad_b);
    std::vector<Tensor> grads{grad_x};
    if (wd.defined()) grads.push_back(grad_w);
    if (has_bias) grads.push_back(grad_b);
    return grads;
  });
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return norm(NormKind::layer, x, weight, bias, eps, "layer_norm");
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return norm(NormKind::rms, x, weight, Tensor(), eps, "rms_norm");
}

}  // namespace libai::ops
