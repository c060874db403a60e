// Every public op, and arithmetic operators on tensors.
//
//   #include "ops/ops.h"
//   Tensor h = x * w + b;                 // ops::mul, ops::add (broadcasting)
//   Tensor y = 0.5 * h - 1.0;             // ops::scale, ops::add_scalar
//   Tensor z = -(y / h);                  // ops::div, ops::neg
//
// The operators are defined in libai::ops. Tensor lives in namespace libai, so they are also
// declared there (using-declarations at the end of this file): argument-dependent lookup then
// finds them from any namespace, with no `using namespace libai::ops;` needed (that works
// too). All operators are differentiable.
#pragma once

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/broadcast.h"
#include "ops/cast.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/packed_linear.h"
#include "ops/reduce.h"
#include "ops/select.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace libai::ops {

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

inline Tensor operator*(const Tensor& x, double factor) { return scale(x, factor); }
inline Tensor operator*(double factor, const Tensor& x) { return scale(x, factor); }
inline Tensor operator/(const Tensor& x, double divisor) { return scale(x, 1.0 / divisor); }
inline Tensor operator+(const Tensor& x, double value) { return add_scalar(x, value); }
inline Tensor operator+(double value, const Tensor& x) { return add_scalar(x, value); }
inline Tensor operator-(const Tensor& x, double value) { return add_scalar(x, -value); }
inline Tensor operator-(double value, const Tensor& x) { return add_scalar(neg(x), value); }

}  // namespace libai::ops

namespace libai {
// Makes the operators visible to argument-dependent lookup on Tensor (see the top).
using ops::operator+;
using ops::operator-;
using ops::operator*;
using ops::operator/;
}  // namespace libai
