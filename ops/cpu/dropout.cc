// CPU kernels of ops/dropout.h.
#include "ops/dropout.h"

#include <algorithm>

#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

// out[j] = in[j] * scale where uniform(key, first + j) >= threshold, else 0, for j < count:
// one run of consecutive counters, drawn in blocks so that the Philox rounds vectorise.
template <typename T, typename C>
void apply_run(PhiloxKey philox, uint64_t first, const T* in, T* out, int64_t count,
               float threshold, C scale) {
  constexpr int64_t kBlock = 64;
  float u[kBlock];
  for (int64_t j0 = 0; j0 < count; j0 += kBlock) {
    const int64_t m = std::min(kBlock, count - j0);
    for (int64_t j = 0; j < kBlock; ++j)
      u[j] = uniform_from_word(philox_first_word(philox, first + uint64_t(j0 + j)));
    for (int64_t j = 0; j < m; ++j)
      out[j0 + j] = u[j] >= threshold ? store<T>(load(in[j0 + j]) * scale) : store<T>(C(0));
  }
}

void dropout_apply_cpu(const Tensor& x, double p, RngKey key, Tensor& out) {
  dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    using C = compute_t<T>;
    const C scale = p < 1.0 ? C(1.0 / (1.0 - p)) : C(0);
    const PhiloxKey philox = philox_key(key);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    parallel_for(0, x.numel(), 1 << 13, [&](int64_t begin, int64_t end) {
      apply_run(philox, uint64_t(begin), in + begin, o + begin, end - begin, float(p), scale);
    });
  });
}

// Rows of the last dim are contiguous in the counter too (its stride is 1), so each row is
// one run of counters starting at the row's base.
void dropout_apply_counter_cpu(const Tensor& x, double p, RngKey key, const DropoutCounter& counter,
                               Tensor& out) {
  dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    using C = compute_t<T>;
    const C scale = p < 1.0 ? C(1.0 / (1.0 - p)) : C(0);
    const PhiloxKey philox = philox_key(key);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const int64_t n = x.dim();
    const int64_t cols = n == 0 ? 1 : x.size(n - 1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    parallel_for(0, rows, std::max<int64_t>(1, (1 << 13) / std::max<int64_t>(cols, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r) {
                     uint64_t base = counter.base;
                     int64_t rest = r;
                     for (int64_t d = n - 2; d >= 0; --d) {
                       base += uint64_t(rest % x.size(d)) * counter.strides[size_t(d)];
                       rest /= x.size(d);
                     }
                     apply_run(philox, base, in + r * cols, o + r * cols, cols, float(p), scale);
                   }
                 });
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(dropout_apply, DeviceType::cpu, dropout_apply_cpu);
LIBAI_REGISTER_KERNEL(dropout_apply_counter, DeviceType::cpu, dropout_apply_counter_cpu);

}  // namespace libai::ops::cpu
