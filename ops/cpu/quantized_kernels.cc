// The kernels that read a quantized matrix (ops/cpu/quantized_kernels.h): AVX-512 (VNNI for
// the integer tiles), AVX2 and plain C++ forms of each, Note [Quantized weights] in
// quantized_gemm.cc.
#include "ops/cpu/quantized_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers implement the unmasked intrinsics with an undefined source operand,
// which -Wmaybe-uninitialized (and, for _mm512_reduce_max_ps, -Wuninitialized) reports at
// every use (a false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace libai::ops::cpu::quantized {

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

// AVX2: the same, 48 columns as 6 vectors of 8 (a CPU without AVX-512 otherwise widened every
// panel of a product of several rows value by value: a 1.1B Llama's 8-token prefill took 5 s).
__attribute__((target("avx2,fma,f16c"))) void widen_panel_avx2(const QuantizedMatrix& b,
                                                                int64_t p, float* dst) {
  if (b.format == QuantFormat::int8) {
    const auto* src = reinterpret_cast<const __m256i*>(b.panel(p));
    __m256 scale[6];
    for (int c = 0; c < 6; ++c) scale[c] = _mm256_loadu_ps(b.scales.data() + p * kPanel + 8 * c);
    for (int64_t q = 0; q < b.quads(); ++q, src += 6) {
      for (int c = 0; c < 6; ++c) {
        const __m256i v = _mm256_loadu_si256(src + c);
        const __m256 w[4] = {lane_byte8<0>(v), lane_byte8<1>(v), lane_byte8<2>(v),
                             lane_byte8<3>(v)};
        for (int t = 0; t < 4 && 4 * q + t < b.k; ++t)
          _mm256_store_ps(dst + (4 * q + t) * kPanel + 8 * c, _mm256_mul_ps(w[t], scale[c]));
      }
    }
    return;
  }
  const __m256i low_nibble = _mm256_set1_epi32(15);
  for (int64_t g = 0; g < b.groups(); ++g) {
    const uint8_t* block = b.panel(p) + g * b.group_bytes();
    const uint16_t* scales = group_scales(b, block);
    for (int c = 0; c < 6; ++c) {
      const __m256 d =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 8 * c)));
      const __m256 m = b.has_min ? _mm256_cvtph_ps(_mm_loadu_si128(
                                       reinterpret_cast<const __m128i*>(scales + kPanel + 8 * c)))
                                 : _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
      for (int64_t i = 0; i < b.group / 2; ++i) {
        const __m256i x = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + i * kPanel + 8 * c)));
        float* row = dst + (g * b.group + 2 * i) * kPanel + 8 * c;
        _mm256_store_ps(row, _mm256_fmadd_ps(
                                 d, _mm256_cvtepi32_ps(_mm256_and_si256(x, low_nibble)), m));
        _mm256_store_ps(row + kPanel,
                        _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 4)), m));
      }
    }
  }
}
#endif

void widen_panel(PackedKernel kernel, const QuantizedMatrix& b, int64_t p, float* dst) {
#if defined(__x86_64__)
  if (kernel == PackedKernel::avx512) return widen_panel_avx512(b, p, dst);
  if (kernel == PackedKernel::avx2) return widen_panel_avx2(b, p, dst);
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
// The row's scale, zero point and 1 / scale (Note [Quantized weights]: asymmetric rows keep
// a bit that a one-sided row, such as gelu's output, would waste on the side it lacks).
struct RowRange {
  float scale = 0, inv = 0;
  int32_t zero = 128;
};

RowRange row_range(float lo, float hi, bool asymmetric) {
  RowRange r;
  if (!asymmetric) {
    const float amax = std::max(std::fabs(lo), std::fabs(hi));
    r.scale = amax / 127.0f;
    r.inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    return r;
  }
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  r.scale = (hi - lo) / 255.0f;
  if (r.scale <= 0.0f) {
    r.scale = 0.0f;
    r.zero = 0;
    return r;
  }
  r.inv = 1.0f / r.scale;
  r.zero = int32_t(std::clamp(std::nearbyint(-lo * r.inv), 0.0f, 255.0f));
  return r;
}

uint8_t quantize_value(float x, const RowRange& r) {
  return uint8_t(std::clamp(int(std::nearbyint(x * r.inv)) + r.zero, 0, 255));
}

void quantize_row_portable(const float* x, int64_t k, int64_t width, uint8_t* q, float& scale,
                           int32_t& zero, bool asymmetric) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const RowRange r = row_range(lo, hi, asymmetric);
  for (int64_t i = 0; i < k; ++i) q[i] = quantize_value(x[i], r);
  for (int64_t i = k; i < width; ++i) q[i] = uint8_t(r.zero);
  scale = r.scale;
  zero = r.zero;
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void quantize_row_avx512(const float* x, int64_t k,
                                                             int64_t width, uint8_t* q,
                                                             float& scale, int32_t& zero,
                                                             bool asymmetric) {
  __m512 vlo = _mm512_setzero_ps(), vhi = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    vlo = _mm512_min_ps(vlo, v);
    vhi = _mm512_max_ps(vhi, v);
  }
  float lo = _mm512_reduce_min_ps(vlo), hi = _mm512_reduce_max_ps(vhi);
  for (; i < k; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const RowRange r = row_range(lo, hi, asymmetric);
  const __m512 vinv = _mm512_set1_ps(r.inv);
  const __m512i shift = _mm512_set1_epi32(r.zero);
  const __m512i top = _mm512_set1_epi32(255), bottom = _mm512_setzero_si512();
  for (i = 0; i + 16 <= k; i += 16) {
    // cvtps rounds to nearest even, as std::nearbyint does in the default mode.
    __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv)),
                                 shift);
    v = _mm512_min_epi32(_mm512_max_epi32(v, bottom), top);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtusepi32_epi8(v));
  }
  for (; i < k; ++i) q[i] = quantize_value(x[i], r);
  for (; i < width; ++i) q[i] = uint8_t(r.zero);
  scale = r.scale;
  zero = r.zero;
}
#endif

void quantize_row(PackedKernel kernel, const float* x, int64_t k, int64_t width, uint8_t* q,
                  float& scale, int32_t& zero, bool asymmetric) {
#if defined(__x86_64__)
  if (kernel == PackedKernel::avx512)
    return quantize_row_avx512(x, k, width, q, scale, zero, asymmetric);
#endif
  quantize_row_portable(x, k, width, q, scale, zero, asymmetric);
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

}  // namespace libai::ops::cpu::quantized
