#include "ops/cpu/quantized_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ops/cpu/onednn_gemm.h"
#include "ops/cpu/quantized_kernels.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {

// Note [Quantized weights]
// A quantized weight is read by one of three loops, chosen by the number of rows m:
//  - m <= kWeightOnlyRows (decoding: one row per sequence): the kernel reads the packed values
//    and widens them to f32 in registers (int8: a byte of each 32-bit lane shifted out; q4: a
//    nibble masked or shifted out), multiplies them by the f32 activations and applies the
//    column's scale at the end (int8), or each group's scale and minimum to the group's partial
//    sums (q4: Σ_k a_k w_k = d Σ_k a_k u_k + m Σ_k a_k, with m = -8 d when symmetric, the sums
//    of a per group computed once per product). These products are bound by reading the
//    weight: int8 reads a quarter of f32's bytes, q4 (group 32, f16 scales) about a seventh.
//  - more rows, ActivationPrecision::int8 (int8 weights only): each row of A is quantized to u8
//    with a scale and a zero point of its own (a = s_a (u - z): the row's range and 0 over 255
//    levels; a one-sided row such as gelu's output keeps the bit a symmetric scale would spend
//    on the side it lacks: MiniLM's worst cosine 0.982 symmetric, 0.993 so), as vpdpbusd wants
//    its first operand u8; the 8 x 48 tile accumulates u8 x s8 products of 4 consecutive k in
//    int32 lanes (four times the multiply-adds of an f32 FMA per instruction), and the epilogue
//    removes the zero point with the weight's column sums: Σ (u - z) q_w = Σ u q_w - z Σ q_w,
//    exact in int32 for k up to 2^31 / (255 * 127), then scales by s_a s_w. The integer sums
//    are the same on every kernel (VNNI, AVX2's vpmaddwd on 16-bit halves, plain C++).
//    oneDNN's AMX products (when enabled) take s8 rows: those rows are symmetric (z = 128).
//  - more rows, weight-only (int8 and q4 with ActivationPrecision::f32): each panel is widened
//    once per block of rows into an f32 panel in L2 and multiplied by packed_gemm's f32 tile,
//    so the product runs at the f32 kernel's rate plus a pass over the panel per block.
// Where oneDNN's int8 matmul is switched on and runs on AMX tiles (onednn_int8_available; off
// by default, ops/cpu/onednn_gemm.h says why), the integer sums of the second loop come from
// it instead; a kernel forced by force_packed_kernel runs ours.
// Every loop holds a tile's sums over the whole of k in registers (no partial sums in C), then
// packed_gemm's epilogue adds the bias, applies the activation and adds the residual.
namespace {

using namespace quantized;

constexpr int kTileRows = 8;
constexpr int64_t kRowBlock = 192;
constexpr int64_t kSplitMacs = int64_t(1) << 18;  // below: on the calling thread

// A buffer of floats per thread, 64-byte aligned, grown on demand.
float* scratch(size_t floats) {
  thread_local std::unique_ptr<float, void (*)(void*)> buffer(nullptr, std::free);
  thread_local size_t capacity = 0;
  if (floats > capacity) {
    buffer.reset(static_cast<float*>(aligned_bytes(floats * sizeof(float))));
    capacity = floats;
  }
  return buffer.get();
}

// ---------------------------------------------------------------------------------------------
// The three loops over rows [r_begin, r_end) x panels [p_begin, p_end).

struct Product {
  PackedKernel kernel;
  const QuantizedMatrix& b;
  const Epilogue& e;
  float* c;
  int64_t ldc;
};

// Stores a tile's values (rows x kPanel, ld kPanel) to C and runs the epilogue on it.
void store_tile(const Product& w, int rows, int64_t row0, int64_t p, const float* tile) {
  const int64_t col0 = p * kPanel, cols = std::min(kPanel, w.b.n - col0);
  for (int r = 0; r < rows; ++r)
    std::memcpy(w.c + (row0 + r) * w.ldc + col0, tile + r * kPanel, size_t(cols) * sizeof(float));
  detail::finish_tile(rows, cols, w.c + row0 * w.ldc + col0, w.ldc, w.e, row0, col0);
}

void run_few_rows(const Product& w, int64_t m, const float* a, int64_t lda, const float* sums,
                  int64_t p_begin, int64_t p_end) {
  alignas(64) float tile[kWeightOnlyRows * kPanel];
  for (int64_t p = p_begin; p < p_end; ++p) {
    few_rows(w.kernel, int(m), a, lda, sums, w.b, p, tile);
    store_tile(w, int(m), 0, p, tile);
  }
}

void run_widened(const Product& w, int64_t r_begin, int64_t r_end, const float* a, int64_t lda,
                 int64_t p_begin, int64_t p_end) {
  float* panel = scratch(size_t(w.b.k * kPanel));
  alignas(64) float tile[kTileRows * kPanel];
  for (int64_t i0 = r_begin; i0 < r_end; i0 += kRowBlock) {
    const int64_t i1 = std::min(r_end, i0 + kRowBlock);
    for (int64_t p = p_begin; p < p_end; ++p) {
      widen_panel(w.kernel, w.b, p, panel);
      for (int64_t i = i0; i < i1; i += kTileRows) {
        const int rows = int(std::min<int64_t>(kTileRows, i1 - i));
        detail::f32_panel_tile(w.kernel, rows, w.b.k, a + i * lda, lda, panel, tile, kPanel, false);
        store_tile(w, rows, i, p, tile);
      }
    }
  }
}

void run_integer(const Product& w, int64_t r_begin, int64_t r_end, const uint8_t* qa,
                 int64_t qlda, const float* row_scales, const int32_t* row_zeros, int64_t p_begin,
                 int64_t p_end) {
  alignas(64) int32_t sums[kTileRows * kPanel];
  alignas(64) float tile[kTileRows * kPanel];
  for (int64_t i0 = r_begin; i0 < r_end; i0 += kRowBlock) {
    const int64_t i1 = std::min(r_end, i0 + kRowBlock);
    for (int64_t p = p_begin; p < p_end; ++p) {
      const float* scale = w.b.scales.data() + p * kPanel;
      const int32_t* column_sum = w.b.column_sums.data() + p * kPanel;
      for (int64_t i = i0; i < i1; i += kTileRows) {
        const int rows = int(std::min<int64_t>(kTileRows, i1 - i));
        int_tile(w.kernel, rows, qa + i * qlda, qlda, w.b, p, sums);
        for (int r = 0; r < rows; ++r) {
          const float s = row_scales[i + r];
          const int32_t zero = row_zeros[i + r];
          for (int64_t j = 0; j < kPanel; ++j)
            tile[r * kPanel + j] =
                float(sums[r * kPanel + j] - zero * column_sum[j]) * (s * scale[j]);
        }
        store_tile(w, rows, i, p, tile);
      }
    }
  }
}


}  // namespace

bool cpu_has_vnni() { return has_vnni(); }

void quantized_gemm(int64_t m, const float* a, int64_t lda, const QuantizedMatrix& b,
                    const Epilogue& epilogue, float* c, int64_t ldc,
                    ActivationPrecision activations) {
  if (m <= 0 || b.n <= 0) return;
  const PackedKernel kernel = detail::resolved_kernel();
  const Product product{kernel, b, epilogue, c, ldc};
  const int64_t panels = b.panels();
  const bool few = m <= kWeightOnlyRows;
  const bool integer = !few && activations == ActivationPrecision::int8 &&
                       b.format == QuantFormat::int8;

  // What the loops read besides B: A itself, A padded to whole quads (int8, few rows), the
  // group sums of A (q4, few rows), or A quantized (integer).
  std::vector<float> padded, sums;
  std::vector<uint8_t> quantized;
  std::vector<float> row_scales;
  std::vector<int32_t> row_zeros;
  const float* rows_a = a;
  int64_t rows_lda = lda;
  if (few && b.format == QuantFormat::int8 && b.k % 4 != 0) {
    rows_lda = b.quads() * 4;
    padded.assign(size_t(m * rows_lda), 0.0f);
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(padded.data() + i * rows_lda, a + i * lda, size_t(b.k) * sizeof(float));
    rows_a = padded.data();
  }
  if (few && b.format == QuantFormat::q4) {
    const int64_t groups = b.groups();
    sums.assign(size_t(m * groups), 0.0f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t g = 0; g < groups; ++g) {
        float s = 0.0f;
        for (int64_t kk = 0; kk < b.group; ++kk) s += a[i * lda + g * b.group + kk];
        sums[size_t(i * groups + g)] = s;
      }
  }
  const int64_t qlda = b.quads() * 4;
  // oneDNN's products run on OpenMP's threads, whose workers spin a while after each product:
  // the passes around them stay on this thread rather than wake the pool's workers beside them
  // (on 2 cores the two pools fought: 0.30 ms against oneDNN's own 0.08 for 128x768x2304).
  const bool onednn = integer && b.onednn && onednn_int8_available() && !detail::kernel_forced();
  if (integer) {
    quantized.resize(size_t(m * qlda));
    row_scales.resize(size_t(m));
    row_zeros.resize(size_t(m));
    // oneDNN takes s8 rows (u - 128): those are symmetric; ours keep a zero point a row.
    const auto rows = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        quantize_row(kernel, a + i * lda, b.k, qlda, quantized.data() + i * qlda,
                     row_scales[size_t(i)], row_zeros[size_t(i)], /*asymmetric=*/!onednn);
    };
    if (onednn)
      rows(0, m);
    else
      parallel_for(0, m, 32, rows);
  }

  std::unique_ptr<int32_t[]> sums32;  // not zeroed: oneDNN writes every value
  if (onednn) {
    // Note [Quantized weights]: oneDNN's AMX kernels for the int32 sums, s8 rows (q + 128
    // back to q), then the scales and packed_gemm's epilogue per tile.
    for (uint8_t& byte : quantized) byte ^= 0x80;
    sums32.reset(new int32_t[size_t(m * b.n)]);
    if (!onednn_int8_gemm(m, reinterpret_cast<const int8_t*>(quantized.data()), qlda, *b.onednn,
                          sums32.get())) {
      sums32.reset();
      for (uint8_t& byte : quantized) byte ^= 0x80;  // back to u8 for our kernels
    }
  }
  if (sums32) {
    for (int64_t i = 0; i < m; ++i) {
      scale_row(kernel, sums32.get() + i * b.n, row_scales[size_t(i)], b.scales.data(), b.n,
                c + i * ldc);
      detail::finish_tile(1, b.n, c + i * ldc, ldc, epilogue, i, 0);
    }
    return;
  }

  const int64_t macs = m * b.n * b.k;
  const int64_t threads = macs < kSplitMacs ? 1 : thread_budget(current_cpu_device());
  const int64_t panel_parts = std::min(panels, threads);
  const int64_t row_parts =
      few ? 1 : std::clamp<int64_t>(threads / panel_parts, 1, (m + kTileRows - 1) / kTileRows);
  const int64_t rows_each = ((m + row_parts - 1) / row_parts + kTileRows - 1) / kTileRows * kTileRows;
  const auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pp = t % panel_parts, rp = t / panel_parts;
      const int64_t p_begin = panels * pp / panel_parts, p_end = panels * (pp + 1) / panel_parts;
      const int64_t r_begin = std::min(m, rp * rows_each), r_end = std::min(m, r_begin + rows_each);
      if (p_begin >= p_end || r_begin >= r_end) continue;
      if (few)
        run_few_rows(product, m, rows_a, rows_lda, sums.data(), p_begin, p_end);
      else if (integer)
        run_integer(product, r_begin, r_end, quantized.data(), qlda, row_scales.data(),
                    row_zeros.data(), p_begin,
                    p_end);
      else
        run_widened(product, r_begin, r_end, a, lda, p_begin, p_end);
    }
  };
  const int64_t tasks = panel_parts * row_parts;
  if (tasks <= 1)
    run(0, 1);
  else
    parallel_for(0, tasks, 1, run);
}

}  // namespace libai::ops::cpu
