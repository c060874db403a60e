// A GEMM of our own for products by a fixed weight (inference): the weight is packed once into
// the layout the inner kernel reads, and every later product reuses it; the bias, an activation
// and a residual add are applied to each output tile while it is in the core's cache.
//
//   PackedMatrix w = pack_weight(weight_data, /*n=*/3072, /*k=*/768, /*ldw=*/768);
//   packed_gemm(m, x, 768, w, {.bias = b, .act = Act::gelu_tanh}, y, 3072);   // y = gelu(x wᵀ + b)
//
// Note [Packed weights] in packed_gemm.cc says why and how.
#pragma once

#include <cstdint>
#include <memory>

namespace libai::ops::cpu {

// The activations an epilogue can apply (ops/activation.h's formulas).
enum class Act : uint8_t { none, relu, gelu_erf, gelu_tanh, silu };

// How a panel holds its values: f32, or bf16 (the weight rounded to nearest even; the kernels
// widen each value exactly to f32 before its FMA, so the activations stay f32).
enum class PanelFormat : uint8_t { f32, bf16 };

// B = wᵀ (k x n) from a torch-layout weight w [n, k], in panels of kPanel columns, each panel k
// rows of kPanel contiguous values (the last one zero-padded), 64-byte aligned.
struct PackedMatrix {
  static constexpr int64_t kPanel = 48;
  int64_t n = 0, k = 0;
  PanelFormat format = PanelFormat::f32;
  std::shared_ptr<void> data;  // panels() * k * kPanel values of `format`
  int64_t panels() const { return (n + kPanel - 1) / kPanel; }
  int64_t value_bytes() const { return format == PanelFormat::f32 ? 4 : 2; }
  // W: float for f32 panels, uint16_t (bf16 bits) for bf16 panels.
  template <class W>
  const W* panel(int64_t p) const {
    return static_cast<const W*>(data.get()) + p * k * kPanel;
  }
};

// w: n rows of k floats, ldw apart. Splits the copy over the current device's pool.
PackedMatrix pack_weight(const float* w, int64_t n, int64_t k, int64_t ldw,
                         PanelFormat format = PanelFormat::f32);

struct Epilogue {
  const float* bias = nullptr;      // n values added to every row, before the activation
  Act act = Act::none;
  const float* residual = nullptr;  // m x n added after the activation, rows ldr apart
  int64_t ldr = 0;
};

// C (m x n, rows ldc apart) = act(A Bᵀ... i.e. A (m x k, rows lda apart) · B + bias) + residual.
// C must not overlap `residual`.
void packed_gemm(int64_t m, const float* a, int64_t lda, const PackedMatrix& b,
                 const Epilogue& epilogue, float* c, int64_t ldc);

// Which inner kernel runs: the widest the CPU has, unless forced (tests and benchmarks run
// each one on a machine that has them all). `portable` is plain C++.
enum class PackedKernel { automatic, avx512, avx2, portable };
void force_packed_kernel(PackedKernel kernel);
bool packed_kernel_supported(PackedKernel kernel);

// The pieces the quantized kernels (ops/cpu/quantized_gemm.h) share with these.
namespace detail {
// The kernel that runs now: the forced one, else the widest the CPU has.
PackedKernel resolved_kernel();
// Whether a kernel is forced (force_packed_kernel): tests of one kernel then get it alone.
bool kernel_forced();
// C tile (rows <= 8 x kPanel, ldc apart) = A (rows x kc, lda apart) · an f32 panel's kc rows
// (kPanel floats each, 64-byte aligned), plus C's own values when `accumulate`.
void f32_panel_tile(PackedKernel kernel, int rows, int64_t kc, const float* a, int64_t lda,
                    const float* panel, float* c, int64_t ldc, bool accumulate);
// The epilogue on a finished tile: rows x cols of C at (row0, col0) of the whole.
void finish_tile(int rows, int64_t cols, float* c, int64_t ldc, const Epilogue& e, int64_t row0,
                 int64_t col0);
}  // namespace detail

}  // namespace libai::ops::cpu
