// Pointwise activations and unary math, differentiable; one kernel slot for all of them.
//
//   Tensor h = ops::gelu(x);                         // exact: x * Phi(x)
//   Tensor g = ops::gelu(x, ops::GeluApprox::tanh);  // GPT-2's "gelu_new"
//   Tensor s = ops::silu(x);                         // x * sigmoid(x), Llama's MLP
//   Tensor r = ops::rsqrt(ops::add_scalar(v, 1e-5));
//
// Inputs of any layout are accepted (a strided input is copied to a contiguous one first);
// outputs are contiguous, of the input's dtype. f32, bf16 and f16 compute in f32 with the
// vectorised functions of ops/cpu/vector_math.h; f64 computes with <cmath>.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

enum class GeluApprox : uint8_t {
  none,  // x * Phi(x), Phi the standard normal CDF (erf form)
  tanh,  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
};

Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::none);
Tensor relu(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
// x^exponent elementwise (the gradient is exponent * x^(exponent - 1)).
Tensor pow_scalar(const Tensor& x, double exponent);

enum class UnaryOp : uint8_t {
  relu,
  gelu_erf,
  gelu_tanh,
  silu,
  sigmoid,
  tanh,
  exp,
  log,
  sqrt,
  rsqrt,
  pow
};
// True when the backward of `op` is computed from its output rather than its input.
bool unary_backward_uses_output(UnaryOp op);

// x and out contiguous, same shape and floating dtype; param is pow's exponent.
LIBAI_KERNEL_SLOT(unary, void(UnaryOp op, double param, const Tensor& x, Tensor& out));
// grad_in = grad * op'(x); x or y (the forward output) is given, per unary_backward_uses_output.
// All contiguous, same shape and dtype.
LIBAI_KERNEL_SLOT(unary_backward, void(UnaryOp op, double param, const Tensor& x, const Tensor& y,
                                       const Tensor& grad, Tensor& grad_in));

}  // namespace libai::ops
