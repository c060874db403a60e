// Broadcasting (NumPy rules) and its adjoint.
//
//   Shape s = broadcast_shapes({4, 1, 3}, {5, 1}, "add");   // [4, 5, 3]
//   Tensor v = expand_view(b, s);                           // stride-0 view, no copy
//   Tensor g = sum_to(grad, b.shape());                     // sums the broadcast dims
#pragma once

#include "runtime/tensor.h"

namespace libai::ops {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// A view of `x` with shape `shape` (x broadcastable to it); no autograd.
Tensor expand_view(const Tensor& x, const Shape& shape);
// Sums `g` down to `shape` (the adjoint of broadcasting); no autograd.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace libai::ops
