// CPU kernels of ops/reduce.h.
#include <limits>

#include "ops/cpu/strided.h"
#include "ops/reduce.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

// out has x's shape with the reduced dims set to 1 (contiguous). Walk x once and add each
// element into its output slot: the output offset uses stride 0 on reduced dims.
void reduce_sum_cpu(const Tensor& x, const std::vector<int>& dims, Tensor& out) {
  Shape out_strides = out.strides();
  for (int d : dims) out_strides[d] = 0;
  dispatch_floating(x.dtype(), "sum", [&]<typename T>() {
    using C = compute_t<T>;
    const int64_t n_out = out.numel();
    std::vector<C> acc(size_t(n_out), C(0));
    const T* base = static_cast<const T*>(x.storage()->data);
    // Fast path: contiguous x reduced over its last dim only.
    if (x.is_contiguous() && dims.size() == 1 && dims[0] == x.dim() - 1) {
      const int64_t inner = x.shape().back();
      const T* px = x.data<T>();
      parallel_for(0, n_out, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       C s = 0;
                       for (int64_t k = 0; k < inner; ++k) s += load(px[r * inner + k]);
                       acc[r] = s;
                     }
                   });
    } else {
      for_each_strided<2>(x.shape(), {x.strides(), out_strides}, {x.offset(), 0},
                          [&](const int64_t* off) { acc[off[1]] += load(base[off[0]]); });
    }
    T* o = out.data<T>();
    for (int64_t i = 0; i < n_out; ++i) o[i] = store<T>(acc[i]);
  });
}

void reduce_max_cpu(const Tensor& x, int dim, Tensor& values, Tensor& indices) {
  LIBAI_CHECK(x.shape()[dim] > 0, "max: dimension ", dim, " of ", shape_str(x.shape()),
              " is empty");
  Shape out_strides = values.strides();
  out_strides[dim] = 0;
  Shape index_shape = x.shape();
  dispatch_floating(x.dtype(), "max", [&]<typename T>() {
    using C = compute_t<T>;
    const int64_t n_out = values.numel();
    std::vector<C> best(size_t(n_out), -std::numeric_limits<C>::infinity());
    std::vector<int64_t> arg(size_t(n_out), -1);
    const T* base = static_cast<const T*>(x.storage()->data);
    // Iterate with the reduced dim's position tracked through a counter stride trick:
    // element order is row-major, so position along `dim` = (linear / inner) % n.
    int64_t inner = 1;
    for (int d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
    const int64_t n = x.shape()[dim];
    int64_t linear = 0;
    for_each_strided<2>(
        x.shape(), {x.strides(), out_strides}, {x.offset(), 0}, [&](const int64_t* off) {
          C v = load(base[off[0]]);
          int64_t k = (linear / inner) % n;
          ++linear;
          if (arg[off[1]] < 0 || v > best[off[1]] || (v != v && best[off[1]] == best[off[1]])) {
            best[off[1]] = v;
            arg[off[1]] = k;
          }
        });
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    for (int64_t i = 0; i < n_out; ++i) {
      pv[i] = store<T>(best[i]);
      pi[i] = arg[i];
    }
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(reduce_sum, DeviceType::cpu, reduce_sum_cpu);
LIBAI_REGISTER_KERNEL(reduce_max, DeviceType::cpu, reduce_max_cpu);

}  // namespace libai::ops::cpu
