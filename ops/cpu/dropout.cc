// CPU kernels of ops/dropout.h.
#include "ops/dropout.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

void dropout_apply_cpu(const Tensor& x, double p, RngKey key, Tensor& out) {
  dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    using C = compute_t<T>;
    const C scale = p < 1.0 ? C(1.0 / (1.0 - p)) : C(0);
    const float threshold = float(p);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    parallel_for(0, x.numel(), 1 << 13, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const bool keep = uniform(key, uint64_t(i)) >= threshold;
        o[i] = keep ? store<T>(load(in[i]) * scale) : store<T>(C(0));
      }
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
    const float threshold = float(p);
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
                     const T* row_in = in + r * cols;
                     T* row_out = o + r * cols;
                     for (int64_t j = 0; j < cols; ++j) {
                       const bool keep = uniform(key, base + uint64_t(j)) >= threshold;
                       row_out[j] = keep ? store<T>(load(row_in[j]) * scale) : store<T>(C(0));
                     }
                   }
                 });
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(dropout_apply, DeviceType::cpu, dropout_apply_cpu);
LIBAI_REGISTER_KERNEL(dropout_apply_counter, DeviceType::cpu, dropout_apply_counter_cpu);

}  // namespace libai::ops::cpu
