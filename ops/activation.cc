#include "ops/activation.h"

#include "runtime/autograd.h"

namespace libai::ops {
namespace {

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : t.clone_raw(); }

Tensor unary(UnaryOp op, const Tensor& x, double param, const char* name) {
  LIBAI_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", x.dtype(),
              " of shape ", shape_str(x.shape()));
  Tensor input = contiguous(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernel<unary_slot>(x.device())(op, param, input, out);
  if (!autograd::needs_grad({x})) return out;
  // Keep alive only the tensor the derivative needs.
  const bool from_output = unary_backward_uses_output(op);
  Tensor saved_x = from_output ? Tensor() : input.detach();
  Tensor saved_y = from_output ? out.detach() : Tensor();
  return autograd::record(out, name, {x}, [op, param, saved_x, saved_y](const Tensor& g) {
    Tensor grad = contiguous(g);
    Tensor grad_in = Tensor::empty(grad.shape(), grad.dtype(), grad.device());
    kernel<unary_backward_slot>(grad.device())(op, param, saved_x, saved_y, grad, grad_in);
    return std::vector<Tensor>{grad_in};
  });
}

}  // namespace

bool unary_backward_uses_output(UnaryOp op) {
  switch (op) {
    case UnaryOp::sigmoid:
    case UnaryOp::tanh:
    case UnaryOp::exp:
    case UnaryOp::sqrt:
    case UnaryOp::rsqrt: return true;
    default: return false;
  }
}

Tensor gelu(const Tensor& x, GeluApprox approx) {
  return approx == GeluApprox::tanh ? unary(UnaryOp::gelu_tanh, x, 0.0, "gelu")
                                    : unary(UnaryOp::gelu_erf, x, 0.0, "gelu");
}
Tensor relu(const Tensor& x) { return unary(UnaryOp::relu, x, 0.0, "relu"); }
Tensor silu(const Tensor& x) { return unary(UnaryOp::silu, x, 0.0, "silu"); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::sigmoid, x, 0.0, "sigmoid"); }
Tensor tanh(const Tensor& x) { return unary(UnaryOp::tanh, x, 0.0, "tanh"); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::exp, x, 0.0, "exp"); }
Tensor log(const Tensor& x) { return unary(UnaryOp::log, x, 0.0, "log"); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::sqrt, x, 0.0, "sqrt"); }
Tensor rsqrt(const Tensor& x) { return unary(UnaryOp::rsqrt, x, 0.0, "rsqrt"); }
Tensor pow_scalar(const Tensor& x, double exponent) {
  return unary(UnaryOp::pow, x, exponent, "pow_scalar");
}

}  // namespace libai::ops
