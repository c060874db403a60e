// CPU kernels of ops/norm.h. Rows run in parallel; the statistics take two passes over a row
// in L1 (mean, then the centred sum of squares), which avoids the cancellation of sum(x^2) -
// sum(x)^2. f32 rows are read where they lie; 16-bit and f64 rows go through an f32 (f64)
// buffer.
#include <cmath>
#include <vector>

#include "ops/cpu/vector_math.h"
#include "ops/norm.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

constexpr int64_t kGrainElements = 1 << 14;
// The weight/bias gradients sum over rows in this many fixed blocks, then in block order:
// the result does not depend on the number of threads.
constexpr int64_t kReduceBlocks = 64;

template <typename C>
C sum_c(const C* a, const C* b, int64_t n) {
  if constexpr (std::is_same_v<C, float>)
    return dot_f32(a, b, n);
  else {
    C s = 0;
    for (int64_t j = 0; j < n; ++j) s += b ? a[j] * b[j] : a[j];
    return s;
  }
}

// A [hidden] parameter in the compute type, or empty when undefined.
template <typename T, typename C = compute_t<T>>
std::vector<C> load_param(const Tensor& p) {
  std::vector<C> out;
  if (!p.defined()) return out;
  const T* src = p.data<T>();
  out.resize(size_t(p.numel()));
  for (size_t j = 0; j < out.size(); ++j) out[j] = load(src[j]);
  return out;
}

// row (staged) -> normalised values xhat in place; returns {mean, rstd}.
template <typename C>
std::pair<C, C> normalize_row(NormKind kind, C* row, int64_t hidden, C eps) {
  const C inv_n = C(1) / C(hidden);
  C mean = 0;
  if (kind == NormKind::layer) {
    mean = sum_c<C>(row, nullptr, hidden) * inv_n;
    for (int64_t j = 0; j < hidden; ++j) row[j] -= mean;
  }
  const C rstd = C(1) / std::sqrt(sum_c<C>(row, row, hidden) * inv_n + eps);
  for (int64_t j = 0; j < hidden; ++j) row[j] *= rstd;
  return {mean, rstd};
}

// normalize_row, then the weight and the bias, from x to y directly (f32).
void normalize_row_f32(NormKind kind, const float* x, float* y, int64_t hidden, float eps,
                       const float* w, const float* b, float& mean, float& rstd) {
  const float inv_n = 1.0f / float(hidden);
  mean = kind == NormKind::layer ? dot_f32(x, nullptr, hidden) * inv_n : 0.0f;
  rstd = 1.0f / std::sqrt(centred_square_sum_f32(x, mean, hidden) * inv_n + eps);
  const float m = mean, s = rstd;
  if (w && b)
    for (int64_t j = 0; j < hidden; ++j) y[j] = (x[j] - m) * s * w[j] + b[j];
  else if (w)
    for (int64_t j = 0; j < hidden; ++j) y[j] = (x[j] - m) * s * w[j];
  else
    for (int64_t j = 0; j < hidden; ++j) y[j] = (x[j] - m) * s;
}

void norm_forward_cpu(NormKind kind, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  dispatch_floating(x.dtype(), "norm", [&]<typename T>() {
    using C = compute_t<T>;
    const int64_t hidden = x.shape().back(), rows = x.numel() / hidden;
    const std::vector<C> w = load_param<T>(weight), b = load_param<T>(bias);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    C* mp = mean.data<C>();
    C* rp = rstd.data<C>();
    const int64_t grain = std::max<int64_t>(1, kGrainElements / hidden);
    if constexpr (std::is_same_v<T, float>) {
      // f32 rows need no staging: the two statistics passes read x (in L1 after the first)
      // and one pass writes y.
      const float* wp = w.empty() ? nullptr : w.data();
      const float* bp = b.empty() ? nullptr : b.data();
      parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
          normalize_row_f32(kind, xp + r * hidden, yp + r * hidden, hidden, float(eps), wp, bp,
                            mp[r], rp[r]);
      });
      return;
    }
    parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      std::vector<C> buf(static_cast<size_t>(hidden));
      C* row = buf.data();
      for (int64_t r = begin; r < end; ++r) {  // x: [rows, hidden]
        const T* xr = xp + r * hidden;
        for (int64_t j = 0; j < hidden; ++j) row[j] = load(xr[j]);
        auto [m, s] = normalize_row<C>(kind, row, hidden, C(eps));
        mp[r] = m;
        rp[r] = s;
        if (!w.empty())
          for (int64_t j = 0; j < hidden; ++j) row[j] *= w[j];
        if (!b.empty())
          for (int64_t j = 0; j < hidden; ++j) row[j] += b[j];
        T* yr = yp + r * hidden;
        for (int64_t j = 0; j < hidden; ++j) yr[j] = store<T>(row[j]);
      }
    });
  });
}

void norm_backward_cpu(NormKind kind, const Tensor& x, const Tensor& weight, const Tensor& mean,
                       const Tensor& rstd, const Tensor& grad, Tensor& grad_x, Tensor& grad_weight,
                       Tensor& grad_bias) {
  dispatch_floating(x.dtype(), "norm backward", [&]<typename T>() {
    using C = compute_t<T>;
    const int64_t hidden = x.shape().back(), rows = x.numel() / hidden;
    const std::vector<C> w = load_param<T>(weight);
    const T* xp = x.data<T>();
    const T* gp = grad.data<T>();
    T* dxp = grad_x.data<T>();
    const C* mp = mean.data<C>();
    const C* rp = rstd.data<C>();
    const bool want_w = grad_weight.defined(), want_b = grad_bias.defined();
    const int64_t blocks = std::min(rows, kReduceBlocks);
    // [blocks, hidden] partial sums of g * xhat and of g.
    std::vector<C> part_w(want_w ? size_t(blocks * hidden) : 0),
        part_b(want_b ? size_t(blocks * hidden) : 0);
    const C inv_n = C(1) / C(hidden);
    parallel_for(0, blocks, 1, [&](int64_t block_begin, int64_t block_end) {
      const size_t n = static_cast<size_t>(hidden);
      std::vector<C> xhat(n), gy(n), g(n);
      for (int64_t blk = block_begin; blk < block_end; ++blk) {
        C* pw = want_w ? part_w.data() + blk * hidden : nullptr;
        C* pb = want_b ? part_b.data() + blk * hidden : nullptr;
        const int64_t r0 = blk * rows / blocks, r1 = (blk + 1) * rows / blocks;
        for (int64_t r = r0; r < r1; ++r) {
          const T* xr = xp + r * hidden;
          const T* gr = gp + r * hidden;
          const C m = kind == NormKind::layer ? mp[r] : C(0), s = rp[r];
          for (int64_t j = 0; j < hidden; ++j) {
            xhat[j] = (load(xr[j]) - m) * s;
            g[j] = load(gr[j]);
            gy[j] = w.empty() ? g[j] : g[j] * w[j];
          }
          if (pw)
            for (int64_t j = 0; j < hidden; ++j) pw[j] += g[j] * xhat[j];
          if (pb)
            for (int64_t j = 0; j < hidden; ++j) pb[j] += g[j];
          // dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)); rms has no mean(gy) term.
          const C a = kind == NormKind::layer ? sum_c<C>(gy.data(), nullptr, hidden) * inv_n : C(0);
          const C c = sum_c<C>(gy.data(), xhat.data(), hidden) * inv_n;
          T* dxr = dxp + r * hidden;
          for (int64_t j = 0; j < hidden; ++j) dxr[j] = store<T>(s * (gy[j] - a - xhat[j] * c));
        }
      }
    });
    auto finish = [&](const std::vector<C>& part, Tensor& out) {
      T* o = out.data<T>();
      for (int64_t j = 0; j < hidden; ++j) {
        C total = 0;
        for (int64_t blk = 0; blk < blocks; ++blk) total += part[size_t(blk * hidden + j)];
        o[j] = store<T>(total);
      }
    };
    if (want_w) finish(part_w, grad_weight);
    if (want_b) finish(part_b, grad_bias);
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(norm_forward, DeviceType::cpu, norm_forward_cpu);
LIBAI_REGISTER_KERNEL(norm_backward, DeviceType::cpu, norm_backward_cpu);

}  // namespace libai::ops::cpu
