#include "ops/cpu/packed_gemm.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "ops/cpu/vector_math.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace libai::ops::cpu {

// Note [Packed weights]
// OpenBLAS packs both operands of every call into its kernel's layout. For a batch of 128
// tokens through GPT-2 small that packing is a fifth of the forward pass (bench/RESULTS.md,
// issue 19): each weight matrix is copied in full, every call, for 128 rows of work. Here the
// weight is packed once, when a model is prepared for inference, and the activations are read
// where they lie.
//
// Layout: B = wᵀ is cut into panels of kPanel = 48 columns; a panel is its k rows of 48
// contiguous floats. The inner kernel computes an 8 x 48 tile of C (AVX-512: 24 accumulator
// registers, 3 loads of B and 8 broadcasts of A per step of k, 24 FMAs), reading the panel
// front to back. The loops around it (BLIS's order): a thread owns a range of panels (so it
// reads only its part of the weights, once per block of rows); rows in blocks of kRowBlock,
// k in slices of kSlice so that a slice of a panel (kSlice x 48 floats) stays in L1 while
// every 8 rows of the block pass over it, and the block's rows of A (kRowBlock x kSlice) in
// L2; panels go in groups of kPanelGroup whose C block stays in L2 across the slices. While
// the tiles of one slice run, the kernel brings the next slice into L2, a few lines per tile
// spread over its steps of k (a burst of prefetches stalls on the line-fill buffers): the
// weights of a model stream from memory, and this took GPT-2 small's forward at 1 x 128 from
// about 135 to 110 ms. Partial sums of a tile go to C between slices; after the last slice,
// the epilogue adds the bias, applies the activation and adds the residual to the tile while
// it is in L1, so the output is written once instead of three times.
//
// GPT-2's and BERT's widths (768, 2304, 3072, 1536) are multiples of 48; other widths end in
// a zero-padded panel whose tile goes through a small buffer. The AVX2 kernel covers the same
// tile as 4 x 24 halves (12 accumulators); a plain C++ kernel runs elsewhere.
//
// bf16 panels (PanelFormat::bf16) hold the weight rounded to bf16: half the bytes to stream,
// which is what a single row's product (decoding) is bound by. Each kernel is the same loop
// over either format; a bf16 value is widened to the f32 it stands for (a 16-bit shift) as it
// is loaded, and the FMAs, the accumulators and the activations stay f32, so a product by bf16
// panels equals the f32 product by the rounded weight up to summation order.
namespace {

constexpr int64_t kPanel = PackedMatrix::kPanel;
constexpr int kRows = 8;              // rows of a tile
constexpr int64_t kSlice = 256;       // k per slice
constexpr int64_t kRowBlock = 192;    // rows per block
constexpr int64_t kPanelGroup = 8;    // panels whose C block stays in L2 over the slices
constexpr int64_t kSplitMacs = int64_t(1) << 18;  // below: on the calling thread

// C tile (rows x 48, ldc apart) = A (rows x kc, lda apart) · panel slice (kc x 48 values of W:
// float or bf16 bits), plus C's own values when `accumulate`. Along the way the kernel may
// fetch `prefetch.lines` cache lines from `prefetch.next` into L2, one every few steps of k
// (the next slice, for the next tiles).
struct Prefetch {
  const char* next = nullptr;
  int64_t lines = 0;
};
template <class W>
using TileFn = void (*)(int rows, int64_t kc, const float* a, int64_t lda, const W* b, float* c,
                        int64_t ldc, bool accumulate, Prefetch prefetch);

inline float widen(float v) { return v; }
inline float widen(uint16_t bf16_bits) { return std::bit_cast<float>(uint32_t(bf16_bits) << 16); }

template <class W>
void tile_portable(int rows, int64_t kc, const float* a, int64_t lda, const W* b, float* c,
                   int64_t ldc, bool accumulate, Prefetch) {
  float t[kRows][kPanel];
  for (int r = 0; r < rows; ++r)
    for (int64_t j = 0; j < kPanel; ++j) t[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  for (int64_t k = 0; k < kc; ++k)
    for (int r = 0; r < rows; ++r) {
      const float av = a[r * lda + k];
      for (int64_t j = 0; j < kPanel; ++j) t[r][j] += av * widen(b[k * kPanel + j]);
    }
  for (int r = 0; r < rows; ++r) std::memcpy(c + r * ldc, t[r], sizeof(t[r]));
}

#if defined(__x86_64__)

// 16 values of a panel row as f32.
__attribute__((target("avx512f"), always_inline)) inline __m512 load16(const float* p) {
  return _mm512_load_ps(p);  // f32 panel rows are 192 bytes: every 16th value is 64-byte aligned
}
__attribute__((target("avx512f"), always_inline)) inline __m512 load16(const uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  // Zero-masked forms: the unmasked ones trip GCC 12's -Wmaybe-uninitialized in its header.
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, bits), 16));
}
// 8 values as f32.
__attribute__((target("avx2"), always_inline)) inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
__attribute__((target("avx2"), always_inline)) inline __m256 load8(const uint16_t* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

template <int R, class W>
__attribute__((target("avx512f,fma"))) void tile_avx512_rows(int64_t kc, const float* a,
                                                              int64_t lda, const W* b, float* c,
                                                              int64_t ldc, bool accumulate,
                                                              Prefetch pf) {
  __m512 c0[R], c1[R], c2[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (accumulate) {
      c0[r] = _mm512_loadu_ps(c + r * ldc);
      c1[r] = _mm512_loadu_ps(c + r * ldc + 16);
      c2[r] = _mm512_loadu_ps(c + r * ldc + 32);
    } else {
      c0[r] = c1[r] = c2[r] = _mm512_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k, b += kPanel) {
    // One line every 4 steps: a burst of prefetches would fill the line-fill buffers and stall.
    if ((k & 3) == 0 && pf.lines > 0) {
      _mm_prefetch(pf.next, _MM_HINT_T1);
      pf.next += 64;
      --pf.lines;
    }
    const __m512 b0 = load16(b), b1 = load16(b + 16), b2 = load16(b + 32);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + k]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
      c2[r] = _mm512_fmadd_ps(av, b2, c2[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(c + r * ldc, c0[r]);
    _mm512_storeu_ps(c + r * ldc + 16, c1[r]);
    _mm512_storeu_ps(c + r * ldc + 32, c2[r]);
  }
}

template <class W>
void tile_avx512(int rows, int64_t kc, const float* a, int64_t lda, const W* b, float* c,
                 int64_t ldc, bool accumulate, Prefetch pf) {
  switch (rows) {
    case 8: return tile_avx512_rows<8>(kc, a, lda, b, c, ldc, accumulate, pf);
    case 7: return tile_avx512_rows<7>(kc, a, lda, b, c, ldc, accumulate, pf);
    case 6: return tile_avx512_rows<6>(kc, a, lda, b, c, ldc, accumulate, pf);
    case 5: return tile_avx512_rows<5>(kc, a, lda, b, c, ldc, accumulate, pf);
    case 4: return tile_avx512_rows<4>(kc, a, lda, b, c, ldc, accumulate, pf);
    case 3: return tile_avx512_rows<3>(kc, a, lda, b, c, ldc, accumulate, pf);
    case 2: return tile_avx512_rows<2>(kc, a, lda, b, c, ldc, accumulate, pf);
    default: return tile_avx512_rows<1>(kc, a, lda, b, c, ldc, accumulate, pf);
  }
}

// R rows x 24 columns (half a panel; b and c point at the half).
template <int R, class W>
__attribute__((target("avx2,fma"))) void tile_avx2_rows(int64_t kc, const float* a, int64_t lda,
                                                         const W* b, float* c, int64_t ldc,
                                                         bool accumulate) {
  __m256 c0[R], c1[R], c2[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    if (accumulate) {
      c0[r] = _mm256_loadu_ps(c + r * ldc);
      c1[r] = _mm256_loadu_ps(c + r * ldc + 8);
      c2[r] = _mm256_loadu_ps(c + r * ldc + 16);
    } else {
      c0[r] = c1[r] = c2[r] = _mm256_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k, b += kPanel) {
    const __m256 b0 = load8(b), b1 = load8(b + 8), b2 = load8(b + 16);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + k);
      c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
      c2[r] = _mm256_fmadd_ps(av, b2, c2[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(c + r * ldc, c0[r]);
    _mm256_storeu_ps(c + r * ldc + 8, c1[r]);
    _mm256_storeu_ps(c + r * ldc + 16, c2[r]);
  }
}

template <class W>
void tile_avx2(int rows, int64_t kc, const float* a, int64_t lda, const W* b, float* c,
               int64_t ldc, bool accumulate, Prefetch) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int r = std::min(4, rows - r0);
    for (int64_t half = 0; half < kPanel; half += kPanel / 2) {
      const float* ar = a + r0 * lda;
      float* cr = c + r0 * ldc + half;
      switch (r) {
        case 4: tile_avx2_rows<4>(kc, ar, lda, b + half, cr, ldc, accumulate); break;
        case 3: tile_avx2_rows<3>(kc, ar, lda, b + half, cr, ldc, accumulate); break;
        case 2: tile_avx2_rows<2>(kc, ar, lda, b + half, cr, ldc, accumulate); break;
        default: tile_avx2_rows<1>(kc, ar, lda, b + half, cr, ldc, accumulate); break;
      }
    }
  }
}

#endif  // __x86_64__

bool cpu_has(PackedKernel kernel) {
#if defined(__x86_64__)
  if (kernel == PackedKernel::avx512) return __builtin_cpu_supports("avx512f");
  if (kernel == PackedKernel::avx2)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return kernel == PackedKernel::portable;
}

std::atomic<PackedKernel> g_forced{PackedKernel::automatic};

PackedKernel resolve() {
  const PackedKernel forced = g_forced.load(std::memory_order_relaxed);
  if (forced != PackedKernel::automatic) return forced;
  static const PackedKernel best = cpu_has(PackedKernel::avx512) ? PackedKernel::avx512
                                   : cpu_has(PackedKernel::avx2) ? PackedKernel::avx2
                                                                 : PackedKernel::portable;
  return best;
}

template <class W>
TileFn<W> tile_fn(PackedKernel kernel) {
#if defined(__x86_64__)
  if (kernel == PackedKernel::avx512) return tile_avx512<W>;
  if (kernel == PackedKernel::avx2) return tile_avx2<W>;
#endif
  return tile_portable<W>;
}

// Each row of the tile: c = act(c + bias) + residual, 16 lanes at a time (act: a generic
// callable of vector_math, for float and Lanes alike).
template <class F>
void apply_rows(int rows, int64_t cols, float* c, int64_t ldc, const Epilogue& e, int64_t row0,
                int64_t col0, F act) {
  const float* bias = e.bias ? e.bias + col0 : nullptr;
  for (int r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    const float* res = e.residual ? e.residual + (row0 + r) * e.ldr + col0 : nullptr;
    int64_t j = 0;
    for (; j + kLanes <= cols; j += kLanes) {
      Lanes v = load_lanes(cr + j);
      if (bias) v += load_lanes(bias + j);
      v = act(v);
      if (res) v += load_lanes(res + j);
      store_lanes(cr + j, v);
    }
    for (; j < cols; ++j) {
      float v = cr[j];
      if (bias) v += bias[j];
      v = act(v);
      cr[j] = res ? v + res[j] : v;
    }
  }
}

// The epilogue on one finished tile: rows x cols of C at (row0, col0) of the whole.
void finish_tile(int rows, int64_t cols, float* c, int64_t ldc, const Epilogue& e, int64_t row0,
                 int64_t col0) {
  switch (e.act) {
    case Act::none:
      if (e.bias || e.residual)
        apply_rows(rows, cols, c, ldc, e, row0, col0, [](auto x) { return x; });
      return;
    case Act::relu:
      return apply_rows(rows, cols, c, ldc, e, row0, col0, [](auto x) {
        using V = decltype(x);
        return x < 0.0f ? splat<V>(0.0f) : x;
      });
    case Act::gelu_erf:
      return apply_rows(rows, cols, c, ldc, e, row0, col0, [](auto x) { return gelu_erf_v(x); });
    case Act::gelu_tanh:
      return apply_rows(rows, cols, c, ldc, e, row0, col0, [](auto x) { return gelu_tanh_v(x); });
    case Act::silu:
      return apply_rows(rows, cols, c, ldc, e, row0, col0, [](auto x) { return silu_v(x); });
  }
}

// Where run_block goes after the slice (p, k0) of a group of panels [g0, g1): the next panel's
// same slice, else the group's next slice, else the next group's first slice.
template <class W>
Prefetch slice_after(const PackedMatrix& b, int64_t p, int64_t k0, int64_t g0, int64_t g1,
                     int64_t p_end) {
  const int64_t k = b.k;
  const auto at = [&](int64_t panel, int64_t row, int64_t rows) {
    return Prefetch{reinterpret_cast<const char*>(b.panel<W>(panel) + row * kPanel),
                    (rows * kPanel * int64_t(sizeof(W)) + 63) / 64};
  };
  if (p + 1 < g1) return at(p + 1, k0, std::min(kSlice, k - k0));
  if (k0 + kSlice < k) return at(g0, k0 + kSlice, std::min(kSlice, k - k0 - kSlice));
  if (g1 < p_end) return at(g1, 0, std::min(kSlice, k));
  return {};
}

// Rows [row_begin, row_end) x panels [p_begin, p_end) of C.
template <class W>
void run_block(TileFn<W> tile, int64_t row_begin, int64_t row_end, int64_t p_begin,
               int64_t p_end, const float* a, int64_t lda, const PackedMatrix& b,
               const Epilogue& e, float* c, int64_t ldc) {
  const int64_t k = b.k, n = b.n;
  alignas(64) float edge[kRows * kPanel];
  for (int64_t i0 = row_begin; i0 < row_end; i0 += kRowBlock) {
    const int64_t i1 = std::min(row_end, i0 + kRowBlock);
    const int64_t tiles = (i1 - i0 + kRows - 1) / kRows;
    // One tile of rows (decoding): a panel's slices one after another, so that each thread
    // streams its weights front to back.
    const int64_t group = tiles == 1 ? 1 : kPanelGroup;
    for (int64_t g0 = p_begin; g0 < p_end; g0 += group) {
      const int64_t g1 = std::min(p_end, g0 + group);
      for (int64_t k0 = 0; k0 < k; k0 += kSlice) {
        const int64_t kc = std::min(kSlice, k - k0);
        const bool first = k0 == 0, last = k0 + kSlice >= k;
        for (int64_t p = g0; p < g1; ++p) {
          const int64_t col0 = p * kPanel, cols = std::min(kPanel, n - col0);
          const W* slice = b.panel<W>(p) + k0 * kPanel;
          // The next slice comes into L2 a share at a time, with each tile of this one.
          const Prefetch next = slice_after<W>(b, p, k0, g0, g1, p_end);
          const int64_t share = (next.lines + tiles - 1) / tiles;
          int64_t fetched = 0;
          for (int64_t i = i0; i < i1; i += kRows) {
            const Prefetch pf{next.next + fetched * 64, std::min(share, next.lines - fetched)};
            fetched += pf.lines;
            const int rows = int(std::min<int64_t>(kRows, i1 - i));
            float* ct = c + i * ldc + col0;
            const float* at = a + i * lda + k0;
            if (cols == kPanel) {
              tile(rows, kc, at, lda, slice, ct, ldc, !first, pf);
            } else {  // the padded last panel: through `edge`
              if (!first)
                for (int r = 0; r < rows; ++r)
                  std::memcpy(edge + r * kPanel, ct + r * ldc, size_t(cols) * sizeof(float));
              tile(rows, kc, at, lda, slice, edge, kPanel, !first, pf);
              for (int r = 0; r < rows; ++r)
                std::memcpy(ct + r * ldc, edge + r * kPanel, size_t(cols) * sizeof(float));
            }
            if (last) finish_tile(rows, cols, ct, ldc, e, i, col0);
          }
        }
      }
    }
  }
}

}  // namespace

namespace {

template <class W>
void pack_panels(const float* w, int64_t ldw, PackedMatrix& out) {
  const int64_t n = out.n, k = out.k;
  W* data = static_cast<W*>(out.data.get());
  const auto narrow = [](float v) {
    if constexpr (std::is_same_v<W, float>)
      return v;
    else
      return bf16(v).bits;
  };
  parallel_for(0, out.panels(), 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      W* dst = data + p * k * kPanel;
      const int64_t cols = std::min(kPanel, n - p * kPanel);
      // Each weight row read front to back; its values land kPanel apart, in a panel that
      // stays in L2 while it is written.
      for (int64_t j = 0; j < kPanel; ++j) {
        const float* src = w + (p * kPanel + j) * ldw;
        if (j < cols)
          for (int64_t kk = 0; kk < k; ++kk) dst[kk * kPanel + j] = narrow(src[kk]);
        else
          for (int64_t kk = 0; kk < k; ++kk) dst[kk * kPanel + j] = W(0);
      }
    }
  });
}

}  // namespace

PackedMatrix pack_weight(const float* w, int64_t n, int64_t k, int64_t ldw, PanelFormat format) {
  LIBAI_CHECK(n >= 0 && k >= 0 && ldw >= k, "pack_weight: bad shape n=", n, " k=", k,
              " ldw=", ldw);
  PackedMatrix out;
  out.n = n;
  out.k = k;
  out.format = format;
  const size_t values = size_t(out.panels() * k * kPanel);
  const size_t bytes = std::max<size_t>((values * size_t(out.value_bytes()) + 63) / 64 * 64, 64);
  void* data = std::aligned_alloc(64, bytes);
  LIBAI_CHECK(data != nullptr, "pack_weight: could not allocate ", bytes, " bytes");
  out.data = std::shared_ptr<void>(data, [](void* p) { std::free(p); });
  if (format == PanelFormat::f32)
    pack_panels<float>(w, ldw, out);
  else
    pack_panels<uint16_t>(w, ldw, out);
  return out;
}

void packed_gemm(int64_t m, const float* a, int64_t lda, const PackedMatrix& b,
                 const Epilogue& epilogue, float* c, int64_t ldc) {
  if (m <= 0 || b.n <= 0) return;
  if (b.k == 0) {  // an empty product: the epilogue on zeros
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + b.n, 0.0f);
    for (int64_t i = 0; i < m; i += kRows)
      for (int64_t p = 0; p < b.panels(); ++p)
        finish_tile(int(std::min<int64_t>(kRows, m - i)), std::min(kPanel, b.n - p * kPanel),
                    c + i * ldc + p * kPanel, ldc, epilogue, i, p * kPanel);
    return;
  }
  const PackedKernel kernel = resolve();
  const int64_t panels = b.panels();
  const int64_t macs = m * b.n * b.k;
  const int64_t threads = macs < kSplitMacs ? 1 : thread_budget(current_cpu_device());
  // Panels are split first (each thread reads its part of the weights); rows too when there
  // are fewer panels than threads.
  const int64_t panel_parts = std::min(panels, threads);
  const int64_t row_parts =
      std::clamp<int64_t>(threads / panel_parts, 1, (m + kRows - 1) / kRows);
  const int64_t tasks = panel_parts * row_parts;
  const auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pp = t % panel_parts, rp = t / panel_parts;
      const int64_t p_begin = panels * pp / panel_parts, p_end = panels * (pp + 1) / panel_parts;
      const int64_t rows_each = ((m + row_parts - 1) / row_parts + kRows - 1) / kRows * kRows;
      const int64_t r_begin = std::min(m, rp * rows_each), r_end = std::min(m, r_begin + rows_each);
      if (p_begin >= p_end || r_begin >= r_end) continue;
      if (b.format == PanelFormat::f32)
        run_block(tile_fn<float>(kernel), r_begin, r_end, p_begin, p_end, a, lda, b, epilogue, c,
                  ldc);
      else
        run_block(tile_fn<uint16_t>(kernel), r_begin, r_end, p_begin, p_end, a, lda, b, epilogue,
                  c, ldc);
    }
  };
  if (tasks <= 1)
    run(0, 1);
  else
    parallel_for(0, tasks, 1, run);
}

void force_packed_kernel(PackedKernel kernel) {
  LIBAI_CHECK(kernel == PackedKernel::automatic || cpu_has(kernel),
              "force_packed_kernel: this CPU cannot run the requested kernel");
  g_forced.store(kernel, std::memory_order_relaxed);
}

bool packed_kernel_supported(PackedKernel kernel) {
  return kernel == PackedKernel::automatic || cpu_has(kernel);
}

namespace detail {

PackedKernel resolved_kernel() { return resolve(); }
bool kernel_forced() { return g_forced.load(std::memory_order_relaxed) != PackedKernel::automatic; }

void f32_panel_tile(PackedKernel kernel, int rows, int64_t kc, const float* a, int64_t lda,
                    const float* panel, float* c, int64_t ldc, bool accumulate) {
  tile_fn<float>(kernel)(rows, kc, a, lda, panel, c, ldc, accumulate, Prefetch{});
}

void finish_tile(int rows, int64_t cols, float* c, int64_t ldc, const Epilogue& e, int64_t row0,
                 int64_t col0) {
  cpu::finish_tile(rows, cols, c, ldc, e, row0, col0);
}

}  // namespace detail

}  // namespace libai::ops::cpu
