// CPU kernels of ops/select.h.
#include <algorithm>
#include <numeric>

#include "ops/cpu/strided.h"
#include "ops/select.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

// Comparable value of a storage element (16-bit floats compare as float).
template <typename T>
inline auto value_of(T v) {
  if constexpr (is_half_v<T>)
    return float(v);
  else
    return v;
}

template <typename V>
inline bool is_nan(V v) {
  return v != v;  // false for integers
}

void where_forward_cpu(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_all(out.dtype(), "where", [&]<typename T>() {
    // bool and u8 conditions are both one byte; any non-zero byte is true.
    const auto* c = static_cast<const uint8_t*>(cond.storage()->data);
    const T* x = static_cast<const T*>(a.storage()->data);
    const T* y = static_cast<const T*>(b.storage()->data);
    T* o = out.data<T>();
    if (cond.is_contiguous() && a.is_contiguous() && b.is_contiguous()) {
      c += cond.offset(), x += a.offset(), y += b.offset();
      parallel_for(0, out.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) o[i] = c[i] ? x[i] : y[i];
      });
      return;
    }
    int64_t i = 0;
    for_each_strided<3>(out.shape(), {cond.strides(), a.strides(), b.strides()},
                        {cond.offset(), a.offset(), b.offset()},
                        [&](const int64_t* off) { o[i++] = c[off[0]] ? x[off[1]] : y[off[2]]; });
  });
}

template <typename V>
inline bool compare_values(CompareOp op, V x, V y) {
  switch (op) {
    case CompareOp::eq: return x == y;
    case CompareOp::ne: return x != y;
    case CompareOp::lt: return x < y;
    case CompareOp::gt: return x > y;
    case CompareOp::le: return x <= y;
    case CompareOp::ge: return x >= y;
  }
  return false;
}

void compare_cpu(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_all(a.dtype(), "compare", [&]<typename T>() {
    const T* x = static_cast<const T*>(a.storage()->data);
    const T* y = static_cast<const T*>(b.storage()->data);
    bool* o = out.data<bool>();
    int64_t i = 0;
    for_each_strided<2>(out.shape(), {a.strides(), b.strides()}, {a.offset(), b.offset()},
                        [&](const int64_t* off) {
                          o[i++] = compare_values(op, value_of(x[off[0]]), value_of(y[off[1]]));
                        });
  });
}

void argmax_forward_cpu(const Tensor& x, Tensor& indices) {
  // x [outer, n, inner] -> indices [outer, inner]
  const int64_t outer = x.shape()[0], n = x.shape()[1], inner = x.shape()[2];
  dispatch_all(x.dtype(), "argmax", [&]<typename T>() {
    const T* p = x.data<T>();
    int64_t* out = indices.data<int64_t>();
    parallel_for(0, outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r) {
                     const int64_t o = r / inner, i = r % inner;
                     const T* row = p + o * n * inner + i;  // stride inner
                     int64_t best = 0;
                     auto best_v = value_of(row[0]);
                     for (int64_t j = 1; j < n && !is_nan(best_v); ++j) {
                       auto v = value_of(row[j * inner]);
                       if (v > best_v || is_nan(v)) best = j, best_v = v;
                     }
                     out[r] = best;
                   }
                 });
  });
}

void topk_forward_cpu(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices) {
  // x [outer, n, inner] -> [outer, k, inner]
  const int64_t outer = x.shape()[0], n = x.shape()[1], inner = x.shape()[2];
  dispatch_floating(x.dtype(), "topk", [&]<typename T>() {
    const T* p = x.data<T>();
    T* vo = values.data<T>();
    int64_t* io = indices.data<int64_t>();
    parallel_for(0, outer * inner, std::max<int64_t>(1, 2048 / std::max<int64_t>(n, 1)),
                 [&](int64_t begin, int64_t end) {
                   std::vector<int64_t> order(static_cast<size_t>(n));
                   for (int64_t r = begin; r < end; ++r) {
                     const int64_t o = r / inner, i = r % inner;
                     const T* row = p + o * n * inner + i;  // stride inner
                     // NaN ranks above every number (as in torch); ties keep the lower index.
                     auto better = [&](int64_t a, int64_t b) {
                       auto va = value_of(row[a * inner]), vb = value_of(row[b * inner]);
                       const bool na = is_nan(va), nb = is_nan(vb);
                       if (na != nb) return largest ? na : nb;
                       if (!na && va != vb) return largest ? va > vb : va < vb;
                       return a < b;
                     };
                     std::iota(order.begin(), order.end(), 0);
                     std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
                     for (int64_t j = 0; j < k; ++j) {
                       const int64_t dst = (o * k + j) * inner + i;
                       vo[dst] = row[order[j] * inner];
                       io[dst] = order[j];
                     }
                   }
                 });
  });
}

void topk_backward_cpu(const Tensor& grad, const Tensor& indices, Tensor& grad_x) {
  // grad, indices [outer, k, inner] -> grad_x [outer, n, inner]
  const int64_t outer = grad.shape()[0], k = grad.shape()[1], inner = grad.shape()[2];
  const int64_t n = grad_x.shape()[1];
  dispatch_floating(grad.dtype(), "topk backward", [&]<typename T>() {
    const T* g = grad.data<T>();
    const int64_t* idx = indices.data<int64_t>();
    T* gx = grad_x.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t src = (o * k + j) * inner + i;
          gx[(o * n + idx[src]) * inner + i] = g[src];
        }
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(where_forward, DeviceType::cpu, where_forward_cpu);
LIBAI_REGISTER_KERNEL(compare, DeviceType::cpu, compare_cpu);
LIBAI_REGISTER_KERNEL(argmax_forward, DeviceType::cpu, argmax_forward_cpu);
LIBAI_REGISTER_KERNEL(topk_forward, DeviceType::cpu, topk_forward_cpu);
LIBAI_REGISTER_KERNEL(topk_backward, DeviceType::cpu, topk_backward_cpu);

}  // namespace libai::ops::cpu
