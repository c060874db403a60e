// Layer normalisation and RMS normalisation over the last dim, differentiable.
//
//   Tensor y = ops::layer_norm(x, gamma, beta, 1e-5);   // x: [batch, seq, hidden]; gamma, beta:
//   [hidden] Tensor z = ops::layer_norm(x, Tensor(), Tensor());  // no affine part Tensor r =
//   ops::rms_norm(x, weight, 1e-6);          // T5 / Llama: x * rsqrt(mean(x^2) + eps) * weight
//
// weight and bias are optional (an undefined Tensor) and have shape [hidden] and x's dtype.
// Statistics accumulate in f32 (f64 for f64 inputs); each row is read from memory once.
// Backward gives gradients for x, weight and bias; the weight/bias sums over rows use a
// fixed split of the rows, so they do not depend on the thread count.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

enum class NormKind : uint8_t { layer, rms };

// x contiguous [rows, hidden]; weight/bias [hidden] or undefined. Writes y (x's shape and
// dtype) and, per row, mean (layer only) and rstd = 1 / sqrt(var + eps) in f32 (f64 for f64).
LIBAI_KERNEL_SLOT(norm_forward,
                  void(NormKind kind, const Tensor& x, const Tensor& weight, const Tensor& bias,
                       double eps, Tensor& y, Tensor& mean, Tensor& rstd));
// Writes grad_x and, when defined (preallocated [hidden]), grad_weight and grad_bias.
LIBAI_KERNEL_SLOT(norm_backward, void(NormKind kind, const Tensor& x, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& grad,
                                      Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias));

}  // namespace libai::ops
