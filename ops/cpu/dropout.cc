// CPU kernel of ops/dropout.h.
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

}  // namespace

LIBAI_REGISTER_KERNEL(dropout_apply, DeviceType::cpu, dropout_apply_cpu);

}  // namespace libai::ops::cpu
