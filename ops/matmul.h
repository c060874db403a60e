// Matrix products, differentiable: matmul (batched, broadcasting like torch.matmul for
// rank >= 2), bmm, and linear with a torch-layout weight.
//
//   Tensor h = ops::matmul(x, w);                 // [b, s, 768] x [768, 2304] -> [b, s, 2304]
//   Tensor s = ops::bmm(q, k_t);                  // [n, m, k] x [n, k, p] -> [n, m, p]
//   Tensor y = ops::linear(x, weight, bias);      // weight [out, in], bias [out] or Tensor()
//
// Operands may be strided views: a matrix whose last two strides are (ld, 1) or (1, ld) is
// handed to BLAS as is (no-trans / trans), so transposed views cost no copy; only other
// layouts are gathered first. f32 and f64 run OpenBLAS sgemm / dgemm; bf16 and f16 are
// stored in 16 bits and accumulate in f32 (Note [16-bit GEMM] in ops/cpu/matmul.cc).
// The backward passes (dA = dC Bᵀ, dB = Aᵀ dC, summed over broadcast batch dims) run the
// same GEMM on transposed views, so they never transpose memory either.
#pragma once

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

// a [..., m, k] x b [..., k, n] -> [broadcast(...), m, n]; both of rank >= 2.
Tensor matmul(const Tensor& a, const Tensor& b);
// a [batch, m, k] x b [batch, k, n] -> [batch, m, n] (no broadcasting).
Tensor bmm(const Tensor& a, const Tensor& b);
// x [..., in], weight [out, in], bias [out] (optional: an undefined Tensor) -> [..., out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// The product without autograd: a [..., m, k] x b [..., k, n], batch dims broadcast, and the
// result summed down to `out_shape` ([..., m, n] with batch dims that sum_to accepts). This
// is what the backward passes call; bias, when defined, is a contiguous [n] added to every row.
Tensor gemm_raw(const Tensor& a, const Tensor& b, const Shape& out_shape,
                const Tensor& bias = Tensor());

// a [batch..., m, k] and b [batch..., k, n] of one rank and batch shape, any strides; out
// contiguous [out_batch..., m, n] of the same rank, each out_batch dim equal to batch or 1
// (1 = summed over). bias: undefined, or contiguous [n] added once to each output matrix.
LIBAI_KERNEL_SLOT(gemm, void(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out));

}  // namespace libai::ops
