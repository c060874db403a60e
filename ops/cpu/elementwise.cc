// CPU kernels of ops/elementwise.h.
#include "ops/elementwise.h"
#include "ops/cpu/strided.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

template <typename T, typename C>
inline C apply(BinaryOp op, C x, C y) {
  switch (op) {
    case BinaryOp::add: return x + y;
    case BinaryOp::sub: return x - y;
    case BinaryOp::mul: return x * y;
    case BinaryOp::div: return x / y;
  }
  return x;
}

template <typename T, BinaryOp Op>
void binary_contiguous(const T* a, const T* b, T* o, int64_t n) {
  parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      o[i] = store<T>(apply<T, compute_t<T>>(Op, load(a[i]), load(b[i])));
  });
}

void binary_cpu(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_floating(out.dtype(), "binary", [&]<typename T>() {
    T* o = out.data<T>();
    if (a.is_contiguous() && b.is_contiguous()) {
      const T* x = a.data<T>();
      const T* y = b.data<T>();
      switch (op) {
        case BinaryOp::add: return binary_contiguous<T, BinaryOp::add>(x, y, o, out.numel());
        case BinaryOp::sub: return binary_contiguous<T, BinaryOp::sub>(x, y, o, out.numel());
        case BinaryOp::mul: return binary_contiguous<T, BinaryOp::mul>(x, y, o, out.numel());
        case BinaryOp::div: return binary_contiguous<T, BinaryOp::div>(x, y, o, out.numel());
      }
    }
    const T* xb = static_cast<const T*>(a.storage()->data);
    const T* yb = static_cast<const T*>(b.storage()->data);
    int64_t i = 0;
    for_each_strided<2>(
        out.shape(), {a.strides(), b.strides()}, {a.offset(), b.offset()}, [&](const int64_t* off) {
          o[i++] = store<T>(apply<T, compute_t<T>>(op, load(xb[off[0]]), load(yb[off[1]])));
        });
  });
}

void affine_cpu(const Tensor& x, double factor, double offset, Tensor& out) {
  dispatch_floating(out.dtype(), "affine", [&]<typename T>() {
    using C = compute_t<T>;
    const C f = C(factor), c = C(offset);
    T* o = out.data<T>();
    if (x.is_contiguous()) {
      const T* in = x.data<T>();
      parallel_for(0, out.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) o[i] = store<T>(load(in[i]) * f + c);
      });
      return;
    }
    const T* base = static_cast<const T*>(x.storage()->data);
    int64_t i = 0;
    for_each_strided<1>(x.shape(), {x.strides()}, {x.offset()},
                        [&](const int64_t* off) { o[i++] = store<T>(load(base[off[0]]) * f + c); });
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(binary, DeviceType::cpu, binary_cpu);
LIBAI_REGISTER_KERNEL(affine, DeviceType::cpu, affine_cpu);

}  // namespace libai::ops::cpu
