// Vectorisable f32 math for the CPU kernels. A plain loop over these inline functions
// compiles to SIMD code with -O2 -march=native and without -ffast-math: glibc's expf and
// erff are scalar calls that would keep such a loop scalar. f64 kernels use <cmath>.
//
//   for (int64_t i = 0; i < n; ++i) y[i] = cpu::exp_f32(x[i]);
//   for (int64_t i = 0; i < n; ++i) y[i] = x[i] * cpu::normal_cdf_f32(x[i]);   // gelu
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace libai::ops::cpu {

// One vector of f32 lanes as a GCC vector (one AVX-512 register, or two or four narrower
// ones), and its i32 twin.
constexpr int kLanes = 16;
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));
using IntLanes = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));

template <class V>
inline V splat(float x) {
  if constexpr (std::is_same_v<V, float>) {
    return x;
  } else {
    return x - V{};  // a broadcast (x - 0 is x, -0 included); an element loop was not one
  }
}

// e^x within 1.5 ulp over [-86, 88.72] (tests/ops/activation_test.cc); results below e^-86 (about 4.5e-38) flush
// to 0, overflow gives inf, NaN stays NaN. Going through the denormals instead would cost a
// microcode assist per element wherever inputs reach that far (the tails of GELU's erf, masked
// scores): gelu over [-20, 5] ran at 5.1 cycles an element against 1.8 over [-8, 8]. V is
// float, or Lanes for loops that keep their values in registers (exp_sum_f32).
//
// exp_in_range_v is the arithmetic alone, for c in [-86, 89] (not NaN), where callers know
// their arguments are there.
template <class V>
inline V exp_in_range_v(V c) {
  using I = std::conditional_t<std::is_same_v<V, float>, int32_t, IntLanes>;
  constexpr float kLog2e = 1.44269504f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 = hi + lo, hi with 12 zero low bits
  constexpr float kLn2Lo = 1.42860677e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds
  const V n = (c * kLog2e + kRound) - kRound;
  V r = c - n * kLn2Hi;  // exact: n * kLn2Hi has at most 12 + 9 significant bits
  r = r - n * kLn2Lo;    // |r| <= ln2 / 2
  // Degree-6 polynomial fitted (for this file) to e^r for minimax relative error on
  // |r| <= ln2 / 2: 1.9e-9, 1.7e-8 with the coefficients rounded to f32.
  V p = splat<V>(1.3836845755577087e-3f);
  p = p * r + 8.374815806746483e-3f;
  p = p * r + 4.166822507977486e-2f;
  p = p * r + 1.6666419804096222e-1f;
  p = p * r + 4.9999991059303284e-1f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // p * 2^n: n - 1 added to p's exponent field (p in [0.7, 1.42], n in [-124, 128], so the
  // field stays within the normal numbers), then doubled, which overflows to inf past FLT_MAX.
  I ni;
  if constexpr (std::is_same_v<V, float>)
    ni = int32_t(n);
  else
    ni = __builtin_convertvector(n, IntLanes);
  return std::bit_cast<V>(std::bit_cast<I>(p) + ((ni - 1) << 23)) * 2.0f;
}

template <class V>
inline V exp_v(V x) {
  constexpr float kFlush = -86.0f;  // below: 0; above, n >= -124 (see the scaling)
  const V lo = splat<V>(kFlush), hi = splat<V>(89.0f);
  V c = x < lo ? lo : x;
  c = c > hi ? hi : c;
  const V y = exp_in_range_v(c);
  return x != x ? x : x < lo ? splat<V>(0.0f) : y;
}

inline float exp_f32(float x) { return exp_v(x); }
inline Lanes exp_lanes(Lanes x) { return exp_v(x); }

// a * b + c rounded once.
template <class V>
inline V fma_v(V a, V b, V c) {
  if constexpr (std::is_same_v<V, float>) {
    return std::fma(a, b, c);
  } else {
#if defined(__AVX512F__)
    return reinterpret_cast<V>(_mm512_fmadd_ps(reinterpret_cast<__m512>(a),
                                               reinterpret_cast<__m512>(b),
                                               reinterpret_cast<__m512>(c)));
#else
    V out;
    for (int l = 0; l < kLanes; ++l) out[l] = std::fma(a[l], b[l], c[l]);
    return out;
#endif
  }
}

// 1 / d for d in [1, 8]. Lanes on AVX-512: the 14-bit reciprocal estimate and one Newton
// step (within 2^-27 relative, a division's cost of about one cycle an element saved);
// otherwise a division.
template <class V>
inline V reciprocal_1_to_8(V d) {
#if defined(__AVX512F__)
  if constexpr (!std::is_same_v<V, float>) {
    // The zero-masked form: the unmasked one trips GCC 12's -Wmaybe-uninitialized.
    const V r = reinterpret_cast<V>(_mm512_maskz_rcp14_ps(0xffff, reinterpret_cast<__m512>(d)));
    return fma_v(r, fma_v(-d, r, splat<V>(1.0f)), r);  // r + r (1 - d r)
  }
#endif
  return 1.0f / d;
}

// Logistic sigmoid 1 / (1 + e^-x); saturates cleanly to 0 and 1.
template <class V>
inline V sigmoid_v(V x) {
  return 1.0f / (1.0f + exp_v(-x));
}

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation of gelu.
constexpr double kGeluTanhScale = 0.7978845608028654, kGeluTanhCubic = 0.044715;

// gelu's tanh form 0.5 x (1 + tanh(u)) written x * sigmoid(2u), which does not cancel for
// negative u.
template <class V>
inline V gelu_tanh_v(V x) {
  const V u = float(kGeluTanhScale) * (x + float(kGeluTanhCubic) * x * x * x);
  return x * sigmoid_v(2.0f * u);
}

// Note [erfc through erfcx]
// erfc(z) = e^(-z^2) * erfcx(z) for z >= 0, and erfcx(z) / t with t = 1 / (1 + 0.4 z) is a
// smooth function of t on [0.21, 1] (z up to 13 / sqrt 2); a degree-8 polynomial (fitted for
// this file, for minimax relative error) matches it within 7.1e-8 with its coefficients in
// f32, which here carry erfc's factor 1/2. e^(-x^2 / 2) is evaluated with x^2 split into
// hi + lo (an fma), so the tail of the normal CDF keeps f32 relative accuracy where
// 1 + erf(x / sqrt 2) would cancel. Past |x| = 13 the tail is below f32's normal numbers and
// is 0; clamping |x| there keeps the exponential's argument in exp_in_range_v's range.
template <class V>
inline V normal_cdf_and_density_v(V x, V& density) {
  constexpr float kInvSqrt2Pi = 0.39894228f, kEnd = 13.0f;
  constexpr float kA = 0.28284273f;  // 0.4 / sqrt 2: t = 1 / (1 + kA |x|)
  const V ax = x < 0.0f ? -x : x;
  const V a = ax > kEnd ? splat<V>(kEnd) : ax;
  const V t = reciprocal_1_to_8(1.0f + kA * a);
  V p = splat<V>(1.979631558e-02f);
  p = p * t + -6.606711447e-02f;
  p = p * t + 3.340915218e-02f;
  p = p * t + 5.396524444e-02f;
  p = p * t + 3.285682946e-02f;
  p = p * t + 9.974693507e-02f;
  p = p * t + 1.001464874e-01f;
  p = p * t + 1.133359373e-01f;
  p = p * t + 1.128102317e-01f;
  const V half_erfcx = p * t;
  const V hi = a * a, lo = fma_v(a, a, -hi);
  const V e = exp_in_range_v(-0.5f * hi) * (1.0f - 0.5f * lo);  // e^(-x^2 / 2)
  density = kInvSqrt2Pi * e;
  const V half_erfc = ax > kEnd ? splat<V>(0.0f) : e * half_erfcx;  // = Phi(-|x|)
  return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

template <class V>
inline V gelu_erf_v(V x) {
  V density;
  return x * normal_cdf_and_density_v(x, density);
}

template <class V>
inline V silu_v(V x) {
  return x * sigmoid_v(x);
}

inline float sigmoid_f32(float x) { return sigmoid_v(x); }
inline float gelu_tanh_f32(float x) { return gelu_tanh_v(x); }
inline float normal_cdf_and_density_f32(float x, float& density) {
  return normal_cdf_and_density_v(x, density);
}
inline float normal_cdf_f32(float x) {
  float density;
  return normal_cdf_and_density_v(x, density);
}
inline float gelu_erf_f32(float x) { return gelu_erf_v(x); }
inline float silu_f32(float x) { return silu_v(x); }

}  // namespace libai::ops::cpu

namespace libai::ops::cpu {

// Row reductions with 16 independent lanes: without -ffast-math the compiler keeps one
// sequential accumulator (IEEE order), so the lanes are written out to let it vectorise. The
// lanes are a GCC vector (one AVX-512 register, or two or four narrower ones): as a float[16]
// array they were kept on the stack, stored and reloaded at every step (issue 19).
inline Lanes load_lanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline Lanes splat_lanes(float x) { return splat<Lanes>(x); }

inline void store_lanes(float* p, Lanes v) { std::memcpy(p, &v, sizeof v); }

// The lanes summed pairwise (lane l with l + 8, then l + 4, ...): four dependent adds where
// a left-to-right sum had fifteen, which on a 128-wide softmax row cost as much as its exps.
inline float sum_lanes(Lanes v) {
  float s[kLanes];
  std::memcpy(s, &v, sizeof s);
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) s[l] += s[l + width];
  return s[0];
}

inline float max_lanes(Lanes v) {
  float s[kLanes];
  std::memcpy(s, &v, sizeof s);
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) s[l] = s[l + width] > s[l] ? s[l + width] : s[l];
  return s[0];
}

inline float max_f32(const float* x, int64_t n) {
  Lanes acc = splat_lanes(-INFINITY);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const Lanes v = load_lanes(x + j);
    acc = v > acc ? v : acc;
  }
  float m = max_lanes(acc);
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// sum_j a[j] * b[j] (b == nullptr: sum_j a[j]).
inline float dot_f32(const float* a, const float* b, int64_t n) {
  Lanes acc = {};
  int64_t j = 0;
  if (b) {
    for (; j + kLanes <= n; j += kLanes) acc += load_lanes(a + j) * load_lanes(b + j);
  } else {
    for (; j + kLanes <= n; j += kLanes) acc += load_lanes(a + j);
  }
  float s = sum_lanes(acc);
  for (; j < n; ++j) s += b ? a[j] * b[j] : a[j];
  return s;
}

// sum_j (x[j] - shift)^2.
inline float centred_square_sum_f32(const float* x, float shift, int64_t n) {
  Lanes acc = {};
  const Lanes c = splat_lanes(shift);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const Lanes d = load_lanes(x + j) - c;
    acc += d * d;
  }
  float s = sum_lanes(acc);
  for (; j < n; ++j) s += (x[j] - shift) * (x[j] - shift);
  return s;
}

// y[j] = f(x[j]) for j < n, 16 lanes at a time; the last partial vector goes through a
// zero-padded copy, so every element sees the same arithmetic. f: a generic callable that
// takes and returns Lanes (vector_math's *_v functions). y may equal x.
template <class F>
inline void map_lanes(const float* x, float* y, int64_t n, F f) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) store_lanes(y + j, f(load_lanes(x + j)));
  if (j < n) {
    alignas(64) float tail[kLanes] = {};
    std::memcpy(tail, x + j, size_t(n - j) * sizeof(float));
    const Lanes v = f(load_lanes(tail));
    std::memcpy(y + j, &v, size_t(n - j) * sizeof(float));
  }
}

// out[j] = e^(x[j] - shift) (out == nullptr: not stored); returns their sum.
inline float exp_sum_f32(const float* x, float shift, float* out, int64_t n) {
  Lanes acc = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const Lanes e = exp_lanes(load_lanes(x + j) - shift);
    if (out) store_lanes(out + j, e);
    acc += e;
  }
  if (j < n) {  // the tail padded with -inf, whose exponentials are 0
    alignas(64) float tail[kLanes];
    for (int l = 0; l < kLanes; ++l) tail[l] = j + l < n ? x[j + l] : -INFINITY;
    const Lanes e = exp_lanes(load_lanes(tail) - shift);
    if (out) std::memcpy(out + j, &e, size_t(n - j) * sizeof(float));
    acc += e;
  }
  return sum_lanes(acc);
}

}  // namespace libai::ops::cpu
