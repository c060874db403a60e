// Products by a quantized weight (inference): int8 with one scale per output channel, or 4-bit
// with a scale (and optionally a minimum) per group of input values, packed once into the
// layouts the kernels read; the epilogue (bias, activation, residual) is packed_gemm's.
//
//   QuantizedMatrix w = quantize_int8(weight, /*n=*/3072, /*k=*/768, /*ldw=*/768);
//   quantized_gemm(m, x, 768, w, {.bias = b, .act = Act::gelu_tanh}, y, 3072,
//                  ActivationPrecision::int8);        // rows of x quantized per row at run time
//
// Note [Quantized weights] in quantized_gemm.cc says which kernel runs when, and why.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/cpu/packed_gemm.h"

namespace libai::ops::cpu {

struct OnednnInt8Weight;

enum class QuantFormat : uint8_t { int8, q4 };

// B = wᵀ in panels of kPanel columns, like PackedMatrix:
//   int8: a panel is ceil(k / 4) quads, each kPanel columns x 4 consecutive k values (s8), the
//         layout of vpdpbusd's operand; per column a scale (w = q * scale) and the sum of q.
//   q4:   a panel is k / group groups, each group / 2 rows of kPanel bytes (byte j of row r:
//         column j's values at k0 + 2r in its low nibble, k0 + 2r + 1 in its high one, as u in
//         0..15), then kPanel f16 scales d, then (with a minimum) kPanel f16 minimums m:
//         w = d * (u - 8), or w = d * u + m.
struct QuantizedMatrix {
  static constexpr int64_t kPanel = PackedMatrix::kPanel;
  int64_t n = 0, k = 0;
  QuantFormat format = QuantFormat::int8;
  int64_t group = 0;      // q4: k values per scale
  bool has_min = false;   // q4: with a minimum per group
  std::shared_ptr<uint8_t> data;
  std::vector<float> scales;        // int8: panels() * kPanel (zero past n)
  std::vector<int32_t> column_sums; // int8: Σ_k q per column (zero past n)
  // int8 where oneDNN's int8 products run (onednn_int8_available): q in oneDNN's layout.
  std::shared_ptr<const OnednnInt8Weight> onednn;

  int64_t panels() const { return (n + kPanel - 1) / kPanel; }
  int64_t quads() const { return (k + 3) / 4; }            // int8
  int64_t groups() const { return group ? k / group : 0; }  // q4
  int64_t group_bytes() const { return group / 2 * kPanel + kPanel * 2 * (has_min ? 2 : 1); }
  int64_t panel_bytes() const {
    return format == QuantFormat::int8 ? quads() * kPanel * 4 : groups() * group_bytes();
  }
  const uint8_t* panel(int64_t p) const { return data.get() + p * panel_bytes(); }
  // What a product reads: the packed values and the scales (and minimums, column sums).
  int64_t bytes() const;
};

// w: n rows of k floats, ldw apart. int8: symmetric per row of w (scale = max |w| / 127).
QuantizedMatrix quantize_int8(const float* w, int64_t n, int64_t k, int64_t ldw);
// group: 32 or 64 (or any even size dividing k: InvalidArgument otherwise). Symmetric:
// d = (the value of largest magnitude) / -8 rounded to f16, u = clamp(round(w / d) + 8, 0, 15);
// with_min: d = (max - min) / 15 and m = min, both rounded to f16, u = clamp(round((w - m) / d)).
QuantizedMatrix quantize_q4(const float* w, int64_t n, int64_t k, int64_t ldw, int64_t group,
                            bool with_min);
// The weight every product multiplies by: w (n rows of k floats, ldw apart) from `q`.
void dequantize(const QuantizedMatrix& q, float* w, int64_t ldw);

// Note [Quantized checkpoints] (ops/packed_linear.h): the values row by row, as a checkpoint
// stores them, into the packed layout and back. int8: values n x k, scales n. q4: nibbles
// n x k / 2 (byte r of a row: input 2r in its low nibble, 2r + 1 in its high one), d and (with
// a minimum; null otherwise) mins n x k / group, as f16 bits. Nothing is requantized.
QuantizedMatrix pack_int8_rows(const int8_t* values, const float* scales, int64_t n, int64_t k);
void int8_rows(const QuantizedMatrix& q, int8_t* values, float* scales);
QuantizedMatrix pack_q4_rows(const uint8_t* nibbles, const uint16_t* d, const uint16_t* mins,
                             int64_t n, int64_t k, int64_t group);
void q4_rows(const QuantizedMatrix& q, uint8_t* nibbles, uint16_t* d, uint16_t* mins);

// f32: the activations stay f32 (weight-only). int8: an int8 matrix's products of more than a
// few rows quantize each row of A at run time (u8 with a scale and a zero point) and multiply
// in int32 (dynamic quantization); single rows and small groups stay f32 either way.
enum class ActivationPrecision : uint8_t { f32, int8 };

// C (m x n, rows ldc apart) = act(A · B + bias) + residual, B = the dequantised weight.
// C must not overlap A or `residual`.
void quantized_gemm(int64_t m, const float* a, int64_t lda, const QuantizedMatrix& b,
                    const Epilogue& epilogue, float* c, int64_t ldc,
                    ActivationPrecision activations = ActivationPrecision::f32);

// The largest group of rows that takes the weight-only path under ActivationPrecision::int8.
inline constexpr int64_t kWeightOnlyRows = 4;

// Whether the CPU has AVX512-VNNI (the int8 products' widest kernel; force_packed_kernel
// (avx512) uses it when present, else the AVX2 integer kernel).
bool cpu_has_vnni();

}  // namespace libai::ops::cpu
