#include "ops/cpu/quantized_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/onednn_gemm.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/threads.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers implement the unmasked intrinsics with an undefined source operand,
// which -Wmaybe-uninitialized reports at every use (a false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

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
//  - more rows, ActivationPrecision::int8 (int8 weights only): each row of A is quantized
//    symmetrically (scale max |a| / 127) and shifted by 128 to u8, as vpdpbusd wants its first
//    operand; the 8 x 48 tile accumulates u8 x s8 products of 4 consecutive k in int32 lanes
//    (four times the multiply-adds of an f32 FMA per instruction), and the epilogue removes the
//    shift with the weight's column sums: Σ (q_a + 128) q_w = Σ q_a q_w + 128 Σ q_w, exact in
//    int32 for k up to 2^31 / (255 * 127), then scales by s_a s_w. The integer sums are the same
//    on every kernel (VNNI, AVX2's vpmaddwd on 16-bit halves, plain C++).
//  - more rows, weight-only (int8 and q4 with ActivationPrecision::f32): each panel is widened
//    once per block of rows into an f32 panel in L2 and multiplied by packed_gemm's f32 tile,
//    so the product runs at the f32 kernel's rate plus a pass over the panel per block.
// Where oneDNN's int8 matmul is switched on and runs on AMX tiles (onednn_int8_available; off
// by default, ops/cpu/onednn_gemm.h says why), the integer sums of the second loop come from
// it instead; a kernel forced by force_packed_kernel runs ours.
// Every loop holds a tile's sums over the whole of k in registers (no partial sums in C), then
// packed_gemm's epilogue adds the bias, applies the activation and adds the residual.
namespace {

constexpr int64_t kPanel = QuantizedMatrix::kPanel;
constexpr int kTileRows = 8;
constexpr int64_t kRowBlock = 192;
constexpr int64_t kSplitMacs = int64_t(1) << 18;  // below: on the calling thread

void* aligned_bytes(size_t bytes) {
  bytes = std::max<size_t>((bytes + 63) / 64 * 64, 64);
  void* p = std::aligned_alloc(64, bytes);
  LIBAI_CHECK(p != nullptr, "quantize: could not allocate ", bytes, " bytes");
  std::memset(p, 0, bytes);
  return p;
}

std::shared_ptr<uint8_t> allocate(size_t bytes) {
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(aligned_bytes(bytes)),
                                  [](uint8_t* p) { std::free(p); });
}

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

float half_to_float(uint16_t bits) {
  f16 h;
  h.bits = bits;
  return float(h);
}
uint16_t float_to_half(float v) { return f16(v).bits; }

const uint16_t* group_scales(const QuantizedMatrix& b, const uint8_t* block) {
  return reinterpret_cast<const uint16_t*>(block + b.group / 2 * kPanel);
}

}  // namespace

int64_t QuantizedMatrix::bytes() const {
  return panels() * panel_bytes() +
         int64_t(scales.size() * sizeof(float) + column_sums.size() * sizeof(int32_t));
}

QuantizedMatrix quantize_int8(const float* w, int64_t n, int64_t k, int64_t ldw) {
  LIBAI_CHECK(n >= 0 && k >= 0 && ldw >= k, "quantize_int8: bad shape n=", n, " k=", k,
              " ldw=", ldw);
  QuantizedMatrix q;
  q.n = n;
  q.k = k;
  q.format = QuantFormat::int8;
  q.data = allocate(size_t(q.panels() * q.panel_bytes()));
  q.scales.assign(size_t(q.panels() * kPanel), 0.0f);
  q.column_sums.assign(size_t(q.panels() * kPanel), 0);
  std::vector<int8_t> rows(onednn_int8_available() ? size_t(n * k) : 0);
  parallel_for(0, q.panels(), 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      auto* dst = reinterpret_cast<int8_t*>(q.data.get() + p * q.panel_bytes());
      for (int64_t jj = 0; jj < kPanel && p * kPanel + jj < n; ++jj) {
        const int64_t j = p * kPanel + jj;
        const float* row = w + j * ldw;
        float amax = 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) amax = std::max(amax, std::fabs(row[kk]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const int v = int(std::clamp(std::nearbyint(row[kk] * inv), -127.0f, 127.0f));
          dst[((kk / 4) * kPanel + jj) * 4 + kk % 4] = int8_t(v);
          if (!rows.empty()) rows[size_t(j * k + kk)] = int8_t(v);
          sum += v;
        }
        q.scales[size_t(j)] = amax / 127.0f;
        q.column_sums[size_t(j)] = sum;
      }
    }
  });
  if (!rows.empty() && n > 0 && k > 0) q.onednn = onednn_int8_weight(rows.data(), n, k);
  return q;
}

QuantizedMatrix quantize_q4(const float* w, int64_t n, int64_t k, int64_t ldw, int64_t group,
                            bool with_min) {
  LIBAI_CHECK(n >= 0 && k >= 0 && ldw >= k, "quantize_q4: bad shape n=", n, " k=", k,
              " ldw=", ldw);
  LIBAI_CHECK(group >= 2 && group % 2 == 0, "quantize_q4: the group size must be even, not ",
              group);
  LIBAI_CHECK(k % group == 0, "quantize_q4: the input width ", k,
              " is not a multiple of the group size ", group);
  QuantizedMatrix q;
  q.n = n;
  q.k = k;
  q.format = QuantFormat::q4;
  q.group = group;
  q.has_min = with_min;
  q.data = allocate(size_t(q.panels() * q.panel_bytes()));
  parallel_for(0, q.panels(), 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t g = 0; g < q.groups(); ++g) {
        uint8_t* block = q.data.get() + p * q.panel_bytes() + g * q.group_bytes();
        auto* scales = reinterpret_cast<uint16_t*>(block + group / 2 * kPanel);
        uint16_t* mins = scales + kPanel;
        for (int64_t jj = 0; jj < kPanel && p * kPanel + jj < n; ++jj) {
          const float* x = w + (p * kPanel + jj) * ldw + g * group;
          float d = 0.0f, m = 0.0f;
          if (with_min) {
            const auto [lo, hi] = std::minmax_element(x, x + group);
            scales[jj] = float_to_half((*hi - *lo) / 15.0f);
            mins[jj] = float_to_half(*lo);
            d = half_to_float(scales[jj]);
            m = half_to_float(mins[jj]);
          } else {
            float extreme = 0.0f;
            for (int64_t i = 0; i < group; ++i)
              if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
            scales[jj] = float_to_half(extreme / -8.0f);
            d = half_to_float(scales[jj]);
            m = -8.0f * d;
          }
          const float inv = d != 0.0f ? 1.0f / d : 0.0f;
          for (int64_t i = 0; i < group; ++i) {
            const int u = int(std::clamp(std::nearbyint((x[i] - m) * inv), 0.0f, 15.0f));
            uint8_t& byte = block[(i / 2) * kPanel + jj];
            byte = uint8_t(i % 2 == 0 ? (byte & 0xf0) | u : (byte & 0x0f) | (u << 4));
          }
        }
      }
    }
  });
  return q;
}

namespace {

// Column jj's value at k index kk, dequantised.
float value_at(const QuantizedMatrix& b, int64_t p, int64_t jj, int64_t kk) {
  const uint8_t* panel = b.panel(p);
  if (b.format == QuantFormat::int8)
    return float(int8_t(panel[((kk / 4) * kPanel + jj) * 4 + kk % 4])) *
           b.scales[size_t(p * kPanel + jj)];
  const uint8_t* block = panel + (kk / b.group) * b.group_bytes();
  const int64_t i = kk % b.group;
  const int u = i % 2 == 0 ? block[(i / 2) * kPanel + jj] & 15 : block[(i / 2) * kPanel + jj] >> 4;
  const uint16_t* scales = group_scales(b, block);
  const float d = half_to_float(scales[jj]);
  const float m = b.has_min ? half_to_float(scales[kPanel + jj]) : -8.0f * d;
  return d * float(u) + m;
}

}  // namespace

void dequantize(const QuantizedMatrix& q, float* w, int64_t ldw) {
  parallel_for(0, q.n, 16, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t kk = 0; kk < q.k; ++kk)
        w[j * ldw + kk] = value_at(q, j / kPanel, j % kPanel, kk);
  });
}

namespace {

// ---------------------------------------------------------------------------------------------
// Weight-only products of a few rows: out (rows x kPanel, ld kPanel) = A · panel p, scaled.
// int8: a is rows x quads()*4 floats (zero past k), lda apart. q4: sums is rows x groups() of
// Σ a over each group.

void few_rows_int8_portable(int rows, const float* a, int64_t lda, const QuantizedMatrix& b,
                            int64_t p, float* out) {
  const auto* panel = reinterpret_cast<const int8_t*>(b.panel(p));
  for (int r = 0; r < rows; ++r) {
    float acc[kPanel] = {};
    for (int64_t q = 0; q < b.quads(); ++q)
      for (int t = 0; t < 4; ++t) {
        const float av = a[r * lda + q * 4 + t];
        for (int64_t j = 0; j < kPanel; ++j) acc[j] += av * float(panel[(q * kPanel + j) * 4 + t]);
      }
    for (int64_t j = 0; j < kPanel; ++j) out[r * kPanel + j] = acc[j] * b.scales[size_t(p * kPanel + j)];
  }
}

void few_rows_q4_portable(int rows, const float* a, int64_t lda, const float* sums,
                          const QuantizedMatrix& b, int64_t p, float* out) {
  const int64_t groups = b.groups();
  for (int r = 0; r < rows; ++r) {
    float acc[kPanel] = {};
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* block = b.panel(p) + g * b.group_bytes();
      float partial[kPanel] = {};
      for (int64_t i = 0; i < b.group / 2; ++i) {
        const float lo = a[r * lda + g * b.group + 2 * i], hi = a[r * lda + g * b.group + 2 * i + 1];
        for (int64_t j = 0; j < kPanel; ++j) {
          const uint8_t byte = block[i * kPanel + j];
          partial[j] += lo * float(byte & 15);
          partial[j] += hi * float(byte >> 4);
        }
      }
      const uint16_t* scales = group_scales(b, block);
      const float s = sums[r * groups + g];
      for (int64_t j = 0; j < kPanel; ++j) {
        const float d = half_to_float(scales[j]);
        if (b.has_min)
          acc[j] += d * partial[j] + half_to_float(scales[kPanel + j]) * s;
        else
          acc[j] += d * (partial[j] - 8.0f * s);
      }
    }
    std::memcpy(out + r * kPanel, acc, sizeof(acc));
  }
}

#if defined(__x86_64__)

// Byte T of each 32-bit lane, sign-extended, as f32.
template <int T>
__attribute__((target("avx512f"), always_inline)) inline __m512 lane_byte(__m512i v) {
  if constexpr (T == 3)
    return _mm512_cvtepi32_ps(_mm512_srai_epi32(v, 24));
  else
    return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * T), 24));
}

// One k of a quad: acc[r] += a[r][4q + T] * (byte T of v).
template <int R, int T>
__attribute__((target("avx512f,fma"), always_inline)) inline void int8_step(
    __m512 (&acc)[R][3], const __m512i (&v)[3], const float* a, int64_t lda, int64_t q) {
  const __m512 w0 = lane_byte<T>(v[0]), w1 = lane_byte<T>(v[1]), w2 = lane_byte<T>(v[2]);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m512 av = _mm512_set1_ps(a[r * lda + q * 4 + T]);
    acc[r][0] = _mm512_fmadd_ps(av, w0, acc[r][0]);
    acc[r][1] = _mm512_fmadd_ps(av, w1, acc[r][1]);
    acc[r][2] = _mm512_fmadd_ps(av, w2, acc[r][2]);
  }
}

template <int R>
__attribute__((target("avx512f,fma"))) void few_rows_int8_avx512(const float* a, int64_t lda,
                                                                  const QuantizedMatrix& b,
                                                                  int64_t p, float* out) {
  __m512 acc[R][3];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = _mm512_setzero_ps();
  const auto* src = reinterpret_cast<const __m512i*>(b.panel(p));
  const int64_t quads = b.quads();
  for (int64_t q = 0; q < quads; ++q, src += 3) {
    const __m512i v[3] = {_mm512_load_si512(src), _mm512_load_si512(src + 1),
                          _mm512_load_si512(src + 2)};
    int8_step<R, 0>(acc, v, a, lda, q);
    int8_step<R, 1>(acc, v, a, lda, q);
    int8_step<R, 2>(acc, v, a, lda, q);
    int8_step<R, 3>(acc, v, a, lda, q);
  }
  const float* scale = b.scales.data() + p * kPanel;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 3; ++c)
      _mm512_storeu_ps(out + r * kPanel + 16 * c,
                       _mm512_mul_ps(acc[r][c], _mm512_loadu_ps(scale + 16 * c)));
}

template <int R>
__attribute__((target("avx512f,fma"))) void few_rows_q4_avx512(const float* a, int64_t lda,
                                                                const float* sums,
                                                                const QuantizedMatrix& b,
                                                                int64_t p, float* out) {
  __m512 acc[R][3];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = _mm512_setzero_ps();
  const int64_t groups = b.groups(), half = b.group / 2;
  const __m512i low_nibble = _mm512_set1_epi32(15);
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* block = b.panel(p) + g * b.group_bytes();
    __m512 partial[R][3];
    for (int r = 0; r < R; ++r) partial[r][0] = partial[r][1] = partial[r][2] = _mm512_setzero_ps();
    const float* ag = a + g * b.group;
    for (int64_t i = 0; i < half; ++i) {
      const uint8_t* row = block + i * kPanel;
#pragma GCC unroll 3
      for (int c = 0; c < 3; ++c) {
        const __m512i x = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * c)));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(x, low_nibble));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(x, 4));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          partial[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(ag[r * lda + 2 * i]), lo, partial[r][c]);
          partial[r][c] =
              _mm512_fmadd_ps(_mm512_set1_ps(ag[r * lda + 2 * i + 1]), hi, partial[r][c]);
        }
      }
    }
    const uint16_t* scales = group_scales(b, block);
    for (int c = 0; c < 3; ++c) {
      const __m512 d = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 16 * c)));
      if (b.has_min) {
        const __m512 m = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + kPanel + 16 * c)));
        for (int r = 0; r < R; ++r) {
          acc[r][c] = _mm512_fmadd_ps(d, partial[r][c], acc[r][c]);
          acc[r][c] = _mm512_fmadd_ps(m, _mm512_set1_ps(sums[r * groups + g]), acc[r][c]);
        }
      } else {
        for (int r = 0; r < R; ++r)
          acc[r][c] = _mm512_fmadd_ps(
              d, _mm512_sub_ps(partial[r][c], _mm512_set1_ps(8.0f * sums[r * groups + g])),
              acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 3; ++c) _mm512_storeu_ps(out + r * kPanel + 16 * c, acc[r][c]);
}

// AVX2: one row at a time, 48 columns as 6 vectors of 8.
template <int T>
__attribute__((target("avx2"), always_inline)) inline __m256 lane_byte8(__m256i v) {
  if constexpr (T == 3)
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(v, 24));
  else
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * T), 24));
}

__attribute__((target("avx2,fma"))) void few_rows_int8_avx2(int rows, const float* a,
                                                             int64_t lda, const QuantizedMatrix& b,
                                                             int64_t p, float* out) {
  for (int r = 0; r < rows; ++r) {
    __m256 acc[6];
    for (auto& v : acc) v = _mm256_setzero_ps();
    const auto* src = reinterpret_cast<const __m256i*>(b.panel(p));
    const float* ar = a + r * lda;
    for (int64_t q = 0; q < b.quads(); ++q, src += 6) {
      const __m256 a0 = _mm256_set1_ps(ar[4 * q]), a1 = _mm256_set1_ps(ar[4 * q + 1]);
      const __m256 a2 = _mm256_set1_ps(ar[4 * q + 2]), a3 = _mm256_set1_ps(ar[4 * q + 3]);
#pragma GCC unroll 6
      for (int c = 0; c < 6; ++c) {
        const __m256i v = _mm256_loadu_si256(src + c);
        acc[c] = _mm256_fmadd_ps(a0, lane_byte8<0>(v), acc[c]);
        acc[c] = _mm256_fmadd_ps(a1, lane_byte8<1>(v), acc[c]);
        acc[c] = _mm256_fmadd_ps(a2, lane_byte8<2>(v), acc[c]);
        acc[c] = _mm256_fmadd_ps(a3, lane_byte8<3>(v), acc[c]);
      }
    }
    const float* scale = b.scales.data() + p * kPanel;
    for (int c = 0; c < 6; ++c)
      _mm256_storeu_ps(out + r * kPanel + 8 * c,
                       _mm256_mul_ps(acc[c], _mm256_loadu_ps(scale + 8 * c)));
  }
}

__attribute__((target("avx2,fma,f16c"))) void few_rows_q4_avx2(int rows, const float* a,
                                                                int64_t lda, const float* sums,
                                                                const QuantizedMatrix& b,
                                                                int64_t p, float* out) {
  const int64_t groups = b.groups(), half = b.group / 2;
  const __m256i low_nibble = _mm256_set1_epi32(15);
  for (int r = 0; r < rows; ++r) {
    __m256 acc[6];
    for (auto& v : acc) v = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* block = b.panel(p) + g * b.group_bytes();
      const float* ag = a + r * lda + g * b.group;
      __m256 partial[6];
      for (auto& v : partial) v = _mm256_setzero_ps();
      for (int64_t i = 0; i < half; ++i) {
        const __m256 lo_a = _mm256_set1_ps(ag[2 * i]), hi_a = _mm256_set1_ps(ag[2 * i + 1]);
#pragma GCC unroll 6
        for (int c = 0; c < 6; ++c) {
          const __m256i x = _mm256_cvtepu8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + i * kPanel + 8 * c)));
          partial[c] = _mm256_fmadd_ps(lo_a, _mm256_cvtepi32_ps(_mm256_and_si256(x, low_nibble)),
                                       partial[c]);
          partial[c] =
              _mm256_fmadd_ps(hi_a, _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 4)), partial[c]);
        }
      }
      const uint16_t* scales = group_scales(b, block);
      const float s = sums[r * groups + g];
      for (int c = 0; c < 6; ++c) {
        const __m256 d = _mm256_cvtph_ps(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 8 * c)));
        if (b.has_min) {
          const __m256 m = _mm256_cvtph_ps(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + kPanel + 8 * c)));
          acc[c] = _mm256_fmadd_ps(d, partial[c], acc[c]);
          acc[c] = _mm256_fmadd_ps(m, _mm256_set1_ps(s), acc[c]);
        } else {
          acc[c] = _mm256_fmadd_ps(d, _mm256_sub_ps(partial[c], _mm256_set1_ps(8.0f * s)), acc[c]);
        }
      }
    }
    for (int c = 0; c < 6; ++c) _mm256_storeu_ps(out + r * kPanel + 8 * c, acc[c]);
  }
}

#endif  // __x86_64__

void few_rows(PackedKernel kernel, int rows, const float* a, int64_t lda, const float* sums,
              const QuantizedMatrix& b, int64_t p, float* out) {
#if defined(__x86_64__)
  if (kernel == PackedKernel::avx512) {
    if (b.format == QuantFormat::int8) {
      switch (rows) {
        case 4: return few_rows_int8_avx512<4>(a, lda, b, p, out);
        case 3: return few_rows_int8_avx512<3>(a, lda, b, p, out);
        case 2: return few_rows_int8_avx512<2>(a, lda, b, p, out);
        default: return few_rows_int8_avx512<1>(a, lda, b, p, out);
      }
    }
    switch (rows) {
      case 4: return few_rows_q4_avx512<4>(a, lda, sums, b, p, out);
      case 3: return few_rows_q4_avx512<3>(a, lda, sums, b, p, out);
      case 2: return few_rows_q4_avx512<2>(a, lda, sums, b, p, out);
      default: return few_rows_q4_avx512<1>(a, lda, sums, b, p, out);
    }
  }
  if (kernel == PackedKernel::avx2) {
    if (b.format == QuantFormat::int8) return few_rows_int8_avx2(rows, a, lda, b, p, out);
    return few_rows_q4_avx2(rows, a, lda, sums, b, p, out);
  }
#endif
  if (b.format == QuantFormat::int8) return few_rows_int8_portable(rows, a, lda, b, p, out);
  few_rows_q4_portable(rows, a, lda, sums, b, p, out);
}

// ---------------------------------------------------------------------------------------------
// Panel p widened to f32: k rows of kPanel floats (the f32 tile's panel layout).

void widen_panel_portable(const QuantizedMatrix& b, int64_t p, float* dst) {
  for (int64_t kk = 0; kk < b.k; ++kk)
    for (int64_t j = 0; j < kPanel; ++j) dst[kk * kPanel + j] = value_at(b, p, j, kk);
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void widen_panel_avx512(const QuantizedMatrix& b, int64_t p,
                                                            float* dst) {
  if (b.format == QuantFormat::int8) {
    const auto* src = reinterpret_cast<const __m512i*>(b.panel(p));
    __m512 scale[3];
    for (int c = 0; c < 3; ++c) scale[c] = _mm512_loadu_ps(b.scales.data() + p * kPanel + 16 * c);
    for (int64_t q = 0; q < b.quads(); ++q, src += 3) {
      for (int c = 0; c < 3; ++c) {
        const __m512i v = _mm512_loadu_si512(src + c);
        const __m512 w[4] = {lane_byte<0>(v), lane_byte<1>(v), lane_byte<2>(v), lane_byte<3>(v)};
        for (int t = 0; t < 4 && 4 * q + t < b.k; ++t)
          _mm512_store_ps(dst + (4 * q + t) * kPanel + 16 * c, _mm512_mul_ps(w[t], scale[c]));
      }
    }
    return;
  }
  const __m512i low_nibble = _mm512_set1_epi32(15);
  for (int64_t g = 0; g < b.groups(); ++g) {
    const uint8_t* block = b.panel(p) + g * b.group_bytes();
    const uint16_t* scales = group_scales(b, block);
    for (int c = 0; c < 3; ++c) {
      const __m512 d = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 16 * c)));
      const __m512 m =
          b.has_min ? _mm512_cvtph_ps(_mm256_loadu_si256(
                          reinterpret_cast<const __m256i*>(scales + kPanel + 16 * c)))
                    : _mm512_mul_ps(d, _mm512_set1_ps(-8.0f));
      for (int64_t i = 0; i < b.group / 2; ++i) {
        const __m512i x = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + i * kPanel + 16 * c)));
        float* row = dst + (g * b.group + 2 * i) * kPanel + 16 * c;
        _mm512_store_ps(row, _mm512_fmadd_ps(
                                 d, _mm512_cvtepi32_ps(_mm512_and_si512(x, low_nibble)), m));
        _mm512_store_ps(row + kPanel,
                        _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_srli_epi32(x, 4)), m));
      }
    }
  }
}
#endif

void widen_panel(PackedKernel kernel, const QuantizedMatrix& b, int64_t p, float* dst) {
#if defined(__x86_64__)
  if (kernel == PackedKernel::avx512) return widen_panel_avx512(b, p, dst);
#endif
  widen_panel_portable(b, p, dst);
}

// ---------------------------------------------------------------------------------------------
// Integer tiles: out (rows x kPanel int32, ld kPanel) = Σ over the quads of u8 A x s8 panel.
// a: rows of quads()*4 bytes, lda apart.

void int_tile_portable(int rows, const uint8_t* a, int64_t lda, const QuantizedMatrix& b,
                       int64_t p, int32_t* out) {
  const auto* panel = reinterpret_cast<const int8_t*>(b.panel(p));
  for (int r = 0; r < rows; ++r) {
    int32_t acc[kPanel] = {};
    for (int64_t q = 0; q < b.quads(); ++q)
      for (int64_t j = 0; j < kPanel; ++j)
        for (int t = 0; t < 4; ++t)
          acc[j] += int32_t(a[r * lda + 4 * q + t]) * int32_t(panel[(q * kPanel + j) * 4 + t]);
    std::memcpy(out + r * kPanel, acc, sizeof(acc));
  }
}

#if defined(__x86_64__)
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void int_tile_vnni_rows(
    const uint8_t* a, int64_t lda, const QuantizedMatrix& b, int64_t p, int32_t* out) {
  __m512i acc[R][3];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = _mm512_setzero_si512();
  const auto* src = reinterpret_cast<const __m512i*>(b.panel(p));
  const int64_t quads = b.quads();
  for (int64_t q = 0; q < quads; ++q, src += 3) {
    const __m512i b0 = _mm512_load_si512(src), b1 = _mm512_load_si512(src + 1),
                  b2 = _mm512_load_si512(src + 2);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, a + r * lda + 4 * q, 4);
      const __m512i av = _mm512_set1_epi32(four);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], av, b1);
      acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], av, b2);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 3; ++c)
      _mm512_storeu_si512(reinterpret_cast<__m512i*>(out + r * kPanel + 16 * c), acc[r][c]);
}

void int_tile_vnni(int rows, const uint8_t* a, int64_t lda, const QuantizedMatrix& b, int64_t p,
                   int32_t* out) {
  switch (rows) {
    case 8: return int_tile_vnni_rows<8>(a, lda, b, p, out);
    case 7: return int_tile_vnni_rows<7>(a, lda, b, p, out);
    case 6: return int_tile_vnni_rows<6>(a, lda, b, p, out);
    case 5: return int_tile_vnni_rows<5>(a, lda, b, p, out);
    case 4: return int_tile_vnni_rows<4>(a, lda, b, p, out);
    case 3: return int_tile_vnni_rows<3>(a, lda, b, p, out);
    case 2: return int_tile_vnni_rows<2>(a, lda, b, p, out);
    default: return int_tile_vnni_rows<1>(a, lda, b, p, out);
  }
}

// AVX2 has no u8 x s8 product into int32 without saturation: the bytes are split into their
// even and odd 16-bit halves and multiplied by vpmaddwd, exactly.
__attribute__((target("avx2"))) void int_tile_avx2(int rows, const uint8_t* a, int64_t lda,
                                                    const QuantizedMatrix& b, int64_t p,
                                                    int32_t* out) {
  const __m256i even_bytes = _mm256_set1_epi32(0x00ff00ff);
  for (int r0 = 0; r0 < rows; r0 += 2) {
    const int n_rows = std::min(2, rows - r0);
    __m256i acc[2][6];
    for (auto& row : acc)
      for (auto& v : row) v = _mm256_setzero_si256();
    const auto* src = reinterpret_cast<const __m256i*>(b.panel(p));
    for (int64_t q = 0; q < b.quads(); ++q, src += 6) {
      __m256i a_even[2], a_odd[2];
      for (int r = 0; r < n_rows; ++r) {
        int32_t four;
        std::memcpy(&four, a + (r0 + r) * lda + 4 * q, 4);
        const __m256i av = _mm256_set1_epi32(four);
        a_even[r] = _mm256_and_si256(av, even_bytes);
        a_odd[r] = _mm256_srli_epi16(av, 8);
      }
#pragma GCC unroll 6
      for (int c = 0; c < 6; ++c) {
        const __m256i v = _mm256_loadu_si256(src + c);
        const __m256i w_even = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);
        const __m256i w_odd = _mm256_srai_epi16(v, 8);
        for (int r = 0; r < n_rows; ++r)
          acc[r][c] = _mm256_add_epi32(
              acc[r][c], _mm256_add_epi32(_mm256_madd_epi16(a_even[r], w_even),
                                          _mm256_madd_epi16(a_odd[r], w_odd)));
      }
    }
    for (int r = 0; r < n_rows; ++r)
      for (int c = 0; c < 6; ++c)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (r0 + r) * kPanel + 8 * c),
                            acc[r][c]);
  }
}
#endif

bool has_vnni() {
#if defined(__x86_64__)
  static const bool yes = __builtin_cpu_supports("avx512vnni") &&
                          __builtin_cpu_supports("avx512bw");
  return yes;
#else
  return false;
#endif
}

void int_tile(PackedKernel kernel, int rows, const uint8_t* a, int64_t lda,
              const QuantizedMatrix& b, int64_t p, int32_t* out) {
#if defined(__x86_64__)
  if (kernel == PackedKernel::avx512 && has_vnni()) return int_tile_vnni(rows, a, lda, b, p, out);
  if (kernel == PackedKernel::avx512 || kernel == PackedKernel::avx2)
    return int_tile_avx2(rows, a, lda, b, p, out);
#endif
  int_tile_portable(rows, a, lda, b, p, out);
}

// Row i of A (k floats) as u8 (q + 128, zero past k up to `width`) and its scale.
void quantize_row_portable(const float* x, int64_t k, int64_t width, uint8_t* q, float& scale) {
  float amax = 0.0f;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int64_t i = 0; i < k; ++i) q[i] = uint8_t(int(std::nearbyint(x[i] * inv)) + 128);
  for (int64_t i = k; i < width; ++i) q[i] = 128;
  scale = amax / 127.0f;
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void quantize_row_avx512(const float* x, int64_t k,
                                                             int64_t width, uint8_t* q,
                                                             float& scale) {
  __m512 m = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  float amax = _mm512_reduce_max_ps(m);
  for (; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i shift = _mm512_set1_epi32(128);
  for (i = 0; i + 16 <= k; i += 16) {
    // cvtps rounds to nearest even, as std::nearbyint does in the default mode.
    const __m512i v = _mm512_add_epi32(
        _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv)), shift);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtusepi32_epi8(v));
  }
  for (; i < k; ++i) q[i] = uint8_t(int(std::nearbyint(x[i] * inv)) + 128);
  for (; i < width; ++i) q[i] = 128;
  scale = amax / 127.0f;
}
#endif

void quantize_row(PackedKernel kernel, const float* x, int64_t k, int64_t width, uint8_t* q,
                  float& scale) {
#if defined(__x86_64__)
  if (kernel == PackedKernel::avx512) return quantize_row_avx512(x, k, width, q, scale);
#endif
  quantize_row_portable(x, k, width, q, scale);
}

// out[j] = float(sums[j]) * (row_scale * scales[j]) for one row of n values.
void scale_row_portable(const int32_t* sums, float row_scale, const float* scales, int64_t n,
                        float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = float(sums[j]) * (row_scale * scales[j]);
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void scale_row_avx512(const int32_t* sums, float row_scale,
                                                          const float* scales, int64_t n,
                                                          float* out) {
  const __m512 rs = _mm512_set1_ps(row_scale);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(sums + j)),
                                            _mm512_mul_ps(rs, _mm512_loadu_ps(scales + j))));
  scale_row_portable(sums + j, row_scale, scales + j, n - j, out + j);
}
#endif

void scale_row(PackedKernel kernel, const int32_t* sums, float row_scale, const float* scales,
               int64_t n, float* out) {
#if defined(__x86_64__)
  if (kernel == PackedKernel::avx512) return scale_row_avx512(sums, row_scale, scales, n, out);
#endif
  scale_row_portable(sums, row_scale, scales, n, out);
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
                 int64_t qlda, const float* row_scales, int64_t p_begin, int64_t p_end) {
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
          for (int64_t j = 0; j < kPanel; ++j)
            tile[r * kPanel + j] =
                float(sums[r * kPanel + j] - 128 * column_sum[j]) * (s * scale[j]);
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
    const auto rows = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        quantize_row(kernel, a + i * lda, b.k, qlda, quantized.data() + i * qlda,
                     row_scales[size_t(i)]);
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
        run_integer(product, r_begin, r_end, quantized.data(), qlda, row_scales.data(), p_begin,
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
