// Differentiable dtype conversion, the cast that mixed precision's autocast inserts: the
// forward rounds x to `dtype`, the backward converts the gradient back to x's dtype (so a
// f32 parameter cast to bf16 receives an f32 gradient, like torch's ToCopyBackward).
//
//   Tensor w16 = ops::cast(weight, DType::bf16);   // [out, in] f32 -> bf16, on the tape
//   Tensor y = ops::cast(ops::linear(x16, w16), DType::f32);
#pragma once

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

// x itself when it already has `dtype`; otherwise a contiguous copy in `dtype`. Both dtypes
// must be floating.
Tensor cast(const Tensor& x, DType dtype);

// dst[i] = src[i] converted (16-bit formats round to nearest even); both contiguous, floating,
// of one element count. Devices without it convert through to_dtype.
LIBAI_KERNEL_SLOT(cast, void(const Tensor& src, Tensor& dst));

}  // namespace libai::ops
