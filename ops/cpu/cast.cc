// CPU kernel of ops/cast.h: contiguous dtype conversion on the device's threads.
#include "ops/cast.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

void cast_cpu(const Tensor& src, Tensor& dst) {
  LIBAI_ASSERT(src.is_contiguous() && dst.is_contiguous() && src.numel() == dst.numel());
  dispatch_floating(src.dtype(), "cast", [&]<typename S>() {
    dispatch_floating(dst.dtype(), "cast", [&]<typename D>() {
      const S* in = src.data<S>();
      D* out = dst.data<D>();
      parallel_for(0, src.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          if constexpr (std::is_same_v<D, double>)
            out[i] = double(load(in[i]));
          else
            out[i] = store<D>(float(load(in[i])));
        }
      });
    });
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(cast, DeviceType::cpu, cast_cpu);

}  // namespace libai::ops::cpu
