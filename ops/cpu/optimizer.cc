// CPU kernels of ops/optimizer.h: one pass per tensor, 16 lanes at a time (AVX-512), the
// tensor split over the device's threads.
//
// Note [One formula for every lane width]
// The update of one element is written once, as a template over a lane type (F32x16 for
// AVX-512, F32x1 for a portable build), with every multiply-add an explicit fma. The tail of
// a chunk runs the 16-lane code under a mask, so every element of a tensor takes the same
// instructions whatever the chunking or thread count: results are bitwise independent of
// both. The formulas follow torch's single-tensor updates (ops/optimizer.h).
#include <cmath>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "ops/optimizer.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

struct F32x1 {
  float x;
  static constexpr int64_t lanes = 1;
  static F32x1 broadcast(float value) { return {value}; }
  friend F32x1 operator+(F32x1 a, F32x1 b) { return {a.x + b.x}; }
  friend F32x1 operator-(F32x1 a, F32x1 b) { return {a.x - b.x}; }
  friend F32x1 operator*(F32x1 a, F32x1 b) { return {a.x * b.x}; }
  friend F32x1 operator/(F32x1 a, F32x1 b) { return {a.x / b.x}; }
  friend F32x1 fma(F32x1 a, F32x1 b, F32x1 c) { return {std::fma(a.x, b.x, c.x)}; }
  friend F32x1 sqrt(F32x1 a) { return {std::sqrt(a.x)}; }
};

#if defined(__AVX512F__)
struct F32x16 {
  __m512 x;
  static constexpr int64_t lanes = 16;
  static F32x16 broadcast(float value) { return {_mm512_set1_ps(value)}; }
  friend F32x16 operator+(F32x16 a, F32x16 b) { return {_mm512_add_ps(a.x, b.x)}; }
  friend F32x16 operator-(F32x16 a, F32x16 b) { return {_mm512_sub_ps(a.x, b.x)}; }
  friend F32x16 operator*(F32x16 a, F32x16 b) { return {_mm512_mul_ps(a.x, b.x)}; }
  friend F32x16 operator/(F32x16 a, F32x16 b) { return {_mm512_div_ps(a.x, b.x)}; }
  friend F32x16 fma(F32x16 a, F32x16 b, F32x16 c) { return {_mm512_fmadd_ps(a.x, b.x, c.x)}; }
  // Through the zero-masking form: GCC 12 warns about _mm512_sqrt_ps's undefined pass-through.
  friend F32x16 sqrt(F32x16 a) { return {_mm512_maskz_sqrt_ps(__mmask16(0xffff), a.x)}; }
};
#endif

// The lane type of this build, and loads / stores of `count` <= lanes elements (a partial
// vector goes through a mask).
#if defined(__AVX512F__)
using Vec = F32x16;
inline Vec load(const float* p, int64_t count) {
  if (count == 16) return {_mm512_loadu_ps(p)};
  return {_mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), p)};
}
inline void store(float* p, Vec v, int64_t count) {
  if (count == 16)
    _mm512_storeu_ps(p, v.x);
  else
    _mm512_mask_storeu_ps(p, __mmask16((1u << count) - 1), v.x);
}
#else
using Vec = F32x1;
inline Vec load(const float* p, int64_t) { return {*p}; }
inline void store(float* p, Vec v, int64_t) { *p = v.x; }
#endif

// Runs body(index, count) over [0, n) split over the device's threads: whole vectors, then
// one partial vector at the end of each thread's chunk.
template <typename Body>
void for_each_vector(int64_t n, Body&& body) {
  // Memory-bound: chunks of 64K elements (a 256 KiB stripe of each tensor) per thread task.
  parallel_for(0, n, int64_t(1) << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += Vec::lanes)
      body(i, std::min<int64_t>(Vec::lanes, end - i));
  });
}

// The f32 scalars of one AdamW update, from the f64 hyper-parameters (torch casts its Python
// floats to the tensor's f32 the same way).
struct AdamWScalars {
  float decay;           // 1 - lr wd
  float lerp_weight;     // 1 - beta1
  bool lerp_from_start;  // weight < 0.5: m + w (g - m), else g + (w - 1) (g - m) (torch's lerp)
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt, eps;
  float neg_step_size;  // -lr / bc1
};

AdamWScalars adamw_scalars(const AdamWHyper& h) {
  const double bc1 = h.bias_correction ? 1.0 - std::pow(h.beta1, double(h.step)) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(h.beta2, double(h.step)) : 1.0;
  const float weight = float(1.0 - h.beta1);
  return {float(1.0 - h.lr * h.weight_decay),
          weight,
          weight < 0.5f,
          float(h.beta2),
          float(1.0 - h.beta2),
          float(std::sqrt(bc2)),
          float(h.eps),
          float(-(h.lr / bc1))};
}

template <typename V>
inline void adamw_element(V& p, V g, V& m, V& v, const AdamWScalars& s) {
  p = p * V::broadcast(s.decay);
  const V diff = g - m;
  m = s.lerp_from_start ? fma(V::broadcast(s.lerp_weight), diff, m)
                        : fma(V::broadcast(s.lerp_weight - 1.0f), diff, g);
  v = fma(V::broadcast(s.one_minus_beta2) * g, g, v * V::broadcast(s.beta2));
  const V denom = sqrt(v) / V::broadcast(s.bias_correction2_sqrt) + V::broadcast(s.eps);
  p = fma(V::broadcast(s.neg_step_size), m / denom, p);
}

void adamw_update_cpu(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                      const AdamWHyper& hyper) {
  const AdamWScalars s = adamw_scalars(hyper);
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  for_each_vector(param.numel(), [&](int64_t i, int64_t count) {
    Vec pv = load(p + i, count), mv = load(m + i, count), vv = load(v + i, count);
    adamw_element(pv, load(g + i, count), mv, vv, s);
    store(p + i, pv, count);
    store(m + i, mv, count);
    store(v + i, vv, count);
  });
}

struct SgdScalars {
  float weight_decay, momentum, one_minus_dampening, neg_lr;
};

template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
inline void sgd_element(Vec& p, Vec g, Vec& buf, const SgdScalars& s) {
  if constexpr (kDecay) g = fma(Vec::broadcast(s.weight_decay), p, g);
  Vec direction = g;
  if constexpr (kMomentum) {
    if constexpr (kFirst)
      buf = g;
    else
      buf = fma(Vec::broadcast(s.one_minus_dampening), g, buf * Vec::broadcast(s.momentum));
    direction = kNesterov ? fma(Vec::broadcast(s.momentum), buf, g) : buf;
  }
  p = fma(Vec::broadcast(s.neg_lr), direction, p);
}

template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_pass(float* p, const float* g, float* buf, int64_t n, const SgdScalars& s) {
  for_each_vector(n, [&](int64_t i, int64_t count) {
    Vec pv = load(p + i, count), bv{};
    if constexpr (kMomentum && !kFirst) bv = load(buf + i, count);
    sgd_element<kDecay, kMomentum, kFirst, kNesterov>(pv, load(g + i, count), bv, s);
    store(p + i, pv, count);
    if constexpr (kMomentum) store(buf + i, bv, count);
  });
}

void sgd_update_cpu(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdHyper& h) {
  const SgdScalars s{float(h.weight_decay), float(h.momentum), float(1.0 - h.dampening),
                     float(-h.lr)};
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* buf = h.momentum != 0 ? momentum_buffer.data<float>() : nullptr;
  const int64_t n = param.numel();
  // Eight specialisations (decay x momentum x first/nesterov) keep the inner loop branch-free.
  auto with_decay = [&]<bool kDecay>() {
    if (h.momentum == 0)
      sgd_pass<kDecay, false, false, false>(p, g, buf, n, s);
    else if (h.first_step)
      h.nesterov ? sgd_pass<kDecay, true, true, true>(p, g, buf, n, s)
                 : sgd_pass<kDecay, true, true, false>(p, g, buf, n, s);
    else
      h.nesterov ? sgd_pass<kDecay, true, false, true>(p, g, buf, n, s)
                 : sgd_pass<kDecay, true, false, false>(p, g, buf, n, s);
  };
  if (h.weight_decay != 0)
    with_decay.template operator()<true>();
  else
    with_decay.template operator()<false>();
}

}  // namespace

LIBAI_REGISTER_KERNEL(adamw_update_apply, DeviceType::cpu, adamw_update_cpu);
LIBAI_REGISTER_KERNEL(sgd_update_apply, DeviceType::cpu, sgd_update_cpu);

}  // namespace libai::ops::cpu
