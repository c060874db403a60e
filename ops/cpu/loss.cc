// CPU kernels of ops/loss.h: rows in parallel, each row's log-sum-exp computed stably
// (max-shifted) and kept for the backward pass.
#include <cmath>
#include <vector>

#include "ops/cpu/vector_math.h"
#include "ops/loss.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

constexpr int64_t kGrainElements = 1 << 14;

// Throws (on the calling thread, before any parallel work) for a target outside [0, C).
void check_targets(const Tensor& target, int64_t classes, int64_t ignore_index) {
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < target.numel(); ++i) {
    if (t[i] == ignore_index || (t[i] >= 0 && t[i] < classes)) continue;
    Shape position(target.shape().size());
    for (int64_t d = int64_t(position.size()) - 1, rest = i; d >= 0; --d) {
      position[d] = rest % target.shape()[d];
      rest /= target.shape()[d];
    }
    LIBAI_THROW(InvalidArgument, "cross_entropy: target value ", t[i], " at position ",
                shape_str(position), " is out of range [0, ", classes, ") and is not ignore_index ",
                ignore_index);
  }
}

template <typename C>
C row_max(const C* x, int64_t n) {
  if constexpr (std::is_same_v<C, float>) return max_f32(x, n);
  C m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

template <typename C>
C row_exp_sum(const C* x, C shift, int64_t n) {
  if constexpr (std::is_same_v<C, float>) return exp_sum_f32(x, shift, nullptr, n);
  C s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - shift);
  return s;
}

template <typename C>
C row_sum(const C* x, int64_t n) {
  if constexpr (std::is_same_v<C, float>) return dot_f32(x, nullptr, n);
  C s = 0;
  for (int64_t j = 0; j < n; ++j) s += x[j];
  return s;
}

int64_t cross_entropy_forward_cpu(const Tensor& logits, const Tensor& target,
                                  const CrossEntropyOptions& options, Tensor& losses, Tensor& lse) {
  const int64_t classes = logits.shape().back(), rows = target.numel();
  check_targets(target, classes, options.ignore_index);
  const int64_t* t = target.data<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < rows; ++i) count += t[i] != options.ignore_index;
  dispatch_floating(logits.dtype(), "cross_entropy", [&]<typename T>() {
    using C = compute_t<T>;
    const T* xp = logits.data<T>();
    C* lp = losses.data<C>();
    C* sp = lse.data<C>();
    const C eps = C(options.label_smoothing);
    parallel_for(0, rows, std::max<int64_t>(1, kGrainElements / classes),
                 [&](int64_t b, int64_t e) {
                   std::vector<C> buf;
                   for (int64_t r = b; r < e; ++r) {  // logits: [rows, classes]
                     if (t[r] == options.ignore_index) {
                       lp[r] = sp[r] = C(0);
                       continue;
                     }
                     const C* row;
                     if constexpr (std::is_same_v<T, C>) {
                       row = xp + r * classes;
                     } else {
                       buf.resize(size_t(classes));
                       for (int64_t j = 0; j < classes; ++j) buf[j] = load(xp[r * classes + j]);
                       row = buf.data();
                     }
                     const C m = row_max(row, classes);
                     const C log_sum = m + std::log(row_exp_sum(row, m, classes));
                     sp[r] = log_sum;
                     C loss = (C(1) - eps) * (log_sum - row[t[r]]);
                     if (eps != C(0)) loss += eps * (log_sum - row_sum(row, classes) / C(classes));
                     lp[r] = loss;
                   }
                 });
  });
  return count;
}

void cross_entropy_backward_cpu(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                const Tensor& grad_out, double scale,
                                const CrossEntropyOptions& options, Tensor& grad_logits) {
  const int64_t classes = logits.shape().back(), rows = target.numel();
  const int64_t* t = target.data<int64_t>();
  const bool per_row = grad_out.numel() == rows && options.reduction == Reduction::none;
  const std::vector<double> g = grad_out.to_vector<double>();
  dispatch_floating(logits.dtype(), "cross_entropy backward", [&]<typename T>() {
    using C = compute_t<T>;
    const T* xp = logits.data<T>();
    const C* sp = lse.data<C>();
    T* op = grad_logits.data<T>();
    const C eps = C(options.label_smoothing), uniform_part = eps / C(classes);
    parallel_for(0, rows, std::max<int64_t>(1, kGrainElements / classes),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     T* orow = op + r * classes;
                     if (t[r] == options.ignore_index) {
                       for (int64_t j = 0; j < classes; ++j) orow[j] = store<T>(C(0));
                       continue;
                     }
                     const C w = C(scale * (per_row ? g[size_t(r)] : g[0]));
                     const T* xr = xp + r * classes;
                     const C shift = sp[r];
                     for (int64_t j = 0; j < classes; ++j) {
                       C p;
                       if constexpr (std::is_same_v<C, float>)
                         p = exp_f32(load(xr[j]) - shift);
                       else
                         p = std::exp(load(xr[j]) - shift);
                       const C target_part = j == t[r] ? C(1) - eps : C(0);
                       orow[j] = store<T>(w * (p - uniform_part - target_part));
                     }
                   }
                 });
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(cross_entropy_forward, DeviceType::cpu, cross_entropy_forward_cpu);
LIBAI_REGISTER_KERNEL(cross_entropy_backward, DeviceType::cpu, cross_entropy_backward_cpu);

}  // namespace libai::ops::cpu
