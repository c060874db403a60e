// Elementwise arithmetic with broadcasting, differentiable.
//
//   Tensor y = ops::add(x, bias);      // [b, s, h] + [h]
//   Tensor z = ops::mul(y, y);
//   Tensor w = ops::scale(z, 0.5);
//   Tensor q = x + y * 2.0;            // operators from ops/ops.h
#pragma once

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double factor);
Tensor add_scalar(const Tensor& x, double value);
Tensor neg(const Tensor& x);

enum class BinaryOp : uint8_t { add, sub, mul, div };
// a and b are already expanded to out's shape; all three have one floating dtype.
LIBAI_KERNEL_SLOT(binary, void(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out));
// out = x * factor + offset
LIBAI_KERNEL_SLOT(affine, void(const Tensor& x, double factor, double offset, Tensor& out));

}  // namespace libai::ops
