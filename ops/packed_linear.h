// Linear layers for inference on the CPU with the weight packed once (Note [Packed weights] in
// ops/cpu/packed_gemm.cc) and the bias, activation and residual add fused into the product.
//
//   PackedWeight w = pack_weight(fc.weight());          // CPU f32 [out, in], once
//   Tensor y = linear_packed(x, w, bias, {.act = UnaryOp::gelu_tanh});       // gelu(x wᵀ + b)
//   Tensor h = linear_packed(y, w2, bias2, {.residual = h_in});             // h_in + y w2ᵀ + b2
//
// No autograd: the inputs must not require gradients (InvalidArgument otherwise), and the
// packed copy does not follow later changes of the weight it was made from (repack after
// loading new values). The activations the kernel fuses are relu, gelu_erf, gelu_tanh and
// silu (fusable() says); with the same f32 formulas as ops/activation.h's, so results equal
// the unfused ops up to the GEMM's summation order.
//
// A weight packed as bf16 (pack_weight(w, DType::bf16)) holds each value rounded to nearest
// even: half the bytes of f32 to read, for products bound by reading the weight (one row at a
// time, decoding). The product is the f32 product by the rounded weight (activations, sums
// and epilogue stay f32).
#pragma once

#include <memory>
#include <optional>

#include "ops/activation.h"
#include "runtime/tensor.h"

namespace libai::ops {

namespace cpu {
struct PackedMatrix;
}

class PackedWeight {
 public:
  PackedWeight() = default;
  bool defined() const { return matrix_ != nullptr; }
  int64_t out_features() const;
  int64_t in_features() const;
  DType dtype() const;  // of the packed values: f32 or bf16
  // The weight's first element when it was packed: a weight tensor that now points elsewhere
  // (reassigned, not updated in place) is no longer this one.
  const void* source() const { return source_; }
  const cpu::PackedMatrix& matrix() const { return *matrix_; }

 private:
  friend PackedWeight pack_weight(const Tensor& weight, DType dtype);
  std::shared_ptr<const cpu::PackedMatrix> matrix_;
  const void* source_ = nullptr;
};

// weight: a CPU f32 [out, in] (any strides); dtype: of the packed copy, f32 or bf16.
// InvalidArgument otherwise.
PackedWeight pack_weight(const Tensor& weight, DType dtype = DType::f32);
// True when `weight` can be packed (CPU, f32, 2-D).
bool packable(const Tensor& weight);
bool fusable(UnaryOp act);

struct LinearEpilogue {
  std::optional<UnaryOp> act;  // applied to x wᵀ + bias; must be fusable()
  Tensor residual;             // [..., out] like the result, added after the activation
};

// x [..., in] (f32, CPU, any strides) -> [..., out] = act(x wᵀ + bias) + residual.
Tensor linear_packed(const Tensor& x, const PackedWeight& weight, const Tensor& bias = Tensor(),
                     const LinearEpilogue& epilogue = {});

// How many linear_packed products this process has run (tests check that a path used them).
uint64_t packed_products();

}  // namespace libai::ops
