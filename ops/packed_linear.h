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
//
// A quantized weight (pack_weight(w, QuantSpec)) holds int8 values with a scale per output
// channel, or 4-bit values with a scale (and optionally a minimum) per group of inputs (Note
// [Quantized weights] in ops/cpu/quantized_gemm.cc). The product is by the dequantised weight
// (dequantized() gives it); under Quantization::int8_dynamic the rows of products of more than
// a few rows are also quantized to int8 at run time and multiplied in int32.
//
//   PackedWeight q = pack_weight(fc.weight(), parse_quantization("q4:32", "--quantize"));
//   Tensor y = linear_packed(x, q, bias);
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ops/activation.h"
#include "runtime/tensor.h"

namespace libai::ops {

namespace cpu {
struct PackedMatrix;
struct QuantizedMatrix;
}  // namespace cpu

// none: not quantized. int8: int8 weights, f32 activations. int8_dynamic: int8 weights, and
// the activations of products of several rows quantized per row at run time (single rows and
// small groups stay f32). q4: 4-bit weights in groups of `group` inputs, f32 activations.
enum class Quantization : uint8_t { none, int8, int8_dynamic, q4 };

struct QuantSpec {
  Quantization kind = Quantization::none;
  int64_t group = 32;     // q4: inputs per scale
  bool with_min = false;  // q4: a minimum per group too (w = d u + m) rather than w = d (u - 8)
  bool operator==(const QuantSpec&) const = default;
};

// "none", "int8", "int8-dynamic", "q4" (group 32), "q4:64", "q4:32:min"; InvalidArgument
// naming `where` and the accepted forms otherwise.
QuantSpec parse_quantization(const std::string& text, const std::string& where);
std::string quantization_name(const QuantSpec& spec);  // parse_quantization's form

// The precision a model's (or a pipeline stage's) packed weights are held in: f32 or bf16
// panels, or a quantization (train.dist.stage_precision; Note [Precision per pipeline stage]
// in schedule/precision.h).
struct WeightPrecision {
  DType pack_dtype = DType::f32;  // f32 or bf16; f32 when quantized
  QuantSpec quantize;
  bool operator==(const WeightPrecision&) const = default;
};
// "f32", "bf16", or a quantization but none ("int8", "int8-dynamic", "q4", "q4:64",
// "q4:32:min"); InvalidArgument naming `where` and the accepted forms otherwise.
WeightPrecision parse_weight_precision(const std::string& text, const std::string& where);
std::string weight_precision_name(const WeightPrecision& precision);  // that form
// The bytes of a packed weight per byte of its f32 values: bf16 a half, int8 a quarter (its
// per-row scale left out), q4 half a byte and an f16 scale (and minimum) per group.
double weight_bytes_ratio(const WeightPrecision& precision);

struct QuantizedTensors;  // Note [Quantized checkpoints] below

class PackedWeight {
 public:
  PackedWeight() = default;
  bool defined() const { return matrix_ != nullptr || quantized_ != nullptr; }
  int64_t out_features() const;
  int64_t in_features() const;
  DType dtype() const;  // of the packed values: f32 or bf16 (f32 when quantized)
  bool quantized() const { return quantized_ != nullptr; }
  const QuantSpec& quantization() const { return quantization_; }
  // The bytes a product reads (packed values, scales).
  int64_t bytes() const;
  // The weight's first element when it was packed: a weight tensor that now points elsewhere
  // (reassigned, not updated in place) is no longer this one.
  const void* source() const { return source_; }
  const cpu::PackedMatrix& matrix() const { return *matrix_; }          // not quantized
  const cpu::QuantizedMatrix& quantized_matrix() const { return *quantized_; }  // quantized

 private:
  friend PackedWeight pack_weight(const Tensor& weight, DType dtype);
  friend PackedWeight pack_weight(const Tensor& weight, const QuantSpec& spec);
  friend PackedWeight pack_quantized(const Tensor& weight, const QuantSpec& spec,
                                     const QuantizedTensors& t, const std::string& what);
  std::shared_ptr<const cpu::PackedMatrix> matrix_;
  std::shared_ptr<const cpu::QuantizedMatrix> quantized_;
  QuantSpec quantization_;
  const void* source_ = nullptr;
};

// weight: a CPU f32 [out, in] (any strides); dtype: of the packed copy, f32 or bf16.
// InvalidArgument otherwise.
PackedWeight pack_weight(const Tensor& weight, DType dtype = DType::f32);
// Quantized as `spec` says (kind none: the f32 copy). InvalidArgument for a q4 group that does
// not divide the weight's input width, naming both.
PackedWeight pack_weight(const Tensor& weight, const QuantSpec& spec);
// Note [Quantized checkpoints]
// A quantized weight as a checkpoint stores it (libai-actor convert --quantize), row by row
// under the weight's name W:
//   int8:      W.q  u8 [out, in]        the int8 values' bytes (two's complement; view as int8)
//              W.scale  f32 [out]       w = q * scale
//   q4:GROUP:  W.q  u8 [out, in / 2]    byte r of a row: input 2r in its low nibble, input
//                                       2r + 1 in its high one, as u in 0..15
//              W.scale  f16 [out, in / GROUP]   d
//              W.min    f16 [out, in / GROUP]   m (":min" only)
//                                       w = d * (u - 8), or w = d * u + m
// quantized_tensors reads them out of a packed weight; pack_quantized packs them back without
// requantizing (CorruptInput naming `what` for a dtype or shape that does not fit the spec).
struct QuantizedTensors {
  Tensor q, scale, min;  // min: q4 with a minimum only
};
QuantizedTensors quantized_tensors(const PackedWeight& weight);
// `weight`: the layer's f32 weight, [out, in], holding these values' dequantisation (the
// packed copy stands for it in the products).
PackedWeight pack_quantized(const Tensor& weight, const QuantSpec& spec, const QuantizedTensors& t,
                            const std::string& what);
// The [out, in] f32 values a quantized weight multiplies by (InvalidArgument if not quantized).
Tensor dequantized(const PackedWeight& weight);
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
