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

namespace libai::ops::cpu {

// e^x, within 2 ulp over the whole f32 range: overflow gives inf, small results go through
// the denormals to 0, NaN stays NaN.
inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 = hi + lo, hi with 12 zero low bits
  constexpr float kLn2Lo = 1.42860677e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds
  const float c = std::min(std::max(x, -104.0f), 89.0f);
  const float n = (c * kLog2e + kRound) - kRound;
  float r = std::fma(-n, kLn2Hi, c);
  r = std::fma(-n, kLn2Lo, r);  // |r| <= ln2 / 2
  // Taylor polynomial of degree 7: truncation error below 6e-9 relative on |r| <= ln2 / 2.
  float p = 1.0f / 5040;
  p = std::fma(p, r, 1.0f / 720);
  p = std::fma(p, r, 1.0f / 120);
  p = std::fma(p, r, 1.0f / 24);
  p = std::fma(p, r, 1.0f / 6);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // 2^n as two normal factors so that n in [-150, 128] needs no special case.
  const int32_t ni = int32_t(n), half = ni >> 1;
  const float s1 = std::bit_cast<float>((half + 127) << 23);
  const float s2 = std::bit_cast<float>((ni - half + 127) << 23);
  const float y = p * s1 * s2;
  return x != x ? x : y;
}

// Logistic sigmoid 1 / (1 + e^-x); saturates cleanly to 0 and 1.
inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation of gelu.
constexpr double kGeluTanhScale = 0.7978845608028654, kGeluTanhCubic = 0.044715;

// gelu's tanh form 0.5 x (1 + tanh(u)) written x * sigmoid(2u), which does not cancel for
// negative u.
inline float gelu_tanh_f32(float x) {
  const float u = float(kGeluTanhScale) * (x + float(kGeluTanhCubic) * x * x * x);
  return x * sigmoid_f32(2.0f * u);
}

// Note [erfc through erfcx]
// erfc(z) = e^(-z^2) * erfcx(z) for z >= 0, and erfcx(z) / t with t = 1 / (1 + z / 2) is a
// smooth function of t on [0.174, 1] (z in [0, 9.5]); a degree-10 Chebyshev interpolant
// (fitted for this file) matches it within 5e-9 relative. e^(-x^2 / 2) is evaluated with
// x^2 split into hi + lo (an fma), so the tail of the normal CDF keeps f32 relative accuracy
// where 1 + erf(x / sqrt 2) would cancel.
inline float normal_cdf_and_density_f32(float x, float& density) {
  constexpr float kInvSqrt2 = 0.70710678f, kInvSqrt2Pi = 0.39894228f;
  const float z = std::min(std::fabs(x) * kInvSqrt2, 10.0f);
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 3.118522379e-02f;
  p = std::fma(p, t, -1.642942573e-01f);
  p = std::fma(p, t, 3.131141783e-01f);
  p = std::fma(p, t, -1.892399295e-01f);
  p = std::fma(p, t, -1.156375876e-01f);
  p = std::fma(p, t, 9.332047397e-02f);
  p = std::fma(p, t, 3.092143341e-02f);
  p = std::fma(p, t, 1.921270554e-01f);
  p = std::fma(p, t, 2.440577999e-01f);
  p = std::fma(p, t, 2.823616777e-01f);
  p = std::fma(p, t, 2.820839338e-01f);
  const float erfcx = p * t;
  const float hi = x * x, lo = std::fma(x, x, -hi);
  const float e = exp_f32(-0.5f * hi) * (1.0f - 0.5f * lo);  // e^(-x^2 / 2)
  density = kInvSqrt2Pi * e;
  const float half_erfc = 0.5f * e * erfcx;  // = Phi(-|x|)
  return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

inline float normal_cdf_f32(float x) {
  float density;
  return normal_cdf_and_density_f32(x, density);
}

inline float gelu_erf_f32(float x) { return x * normal_cdf_f32(x); }
inline float silu_f32(float x) { return x * sigmoid_f32(x); }

}  // namespace libai::ops::cpu

namespace libai::ops::cpu {

// Row reductions with 16 independent lanes: without -ffast-math the compiler keeps one
// sequential accumulator (IEEE order), so the lanes are written out to let it vectorise. The
// lanes are a GCC vector (one AVX-512 register, or two or four narrower ones): as a float[16]
// array they were kept on the stack, stored and reloaded at every step (issue 19).
constexpr int kLanes = 16;
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));

inline Lanes load_lanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline Lanes splat_lanes(float x) {
  Lanes v;
  for (int l = 0; l < kLanes; ++l) v[l] = x;
  return v;
}

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

// out[j] = e^(x[j] - shift) (out == nullptr: not stored); returns their sum.
inline float exp_sum_f32(const float* x, float shift, float* out, int64_t n) {
  Lanes acc = {};
  int64_t j = 0;
  alignas(64) float scratch[kLanes];
  for (; j + kLanes <= n; j += kLanes) {
    float* e = out ? out + j : scratch;
    for (int l = 0; l < kLanes; ++l) e[l] = exp_f32(x[j + l] - shift);
    acc += load_lanes(e);
  }
  float s = sum_lanes(acc);
  for (; j < n; ++j) {
    const float e = exp_f32(x[j] - shift);
    if (out) out[j] = e;
    s += e;
  }
  return s;
}

}  // namespace libai::ops::cpu
