#include "ops/reduce.h"

#include <algorithm>

#include "ops/broadcast.h"
#include "ops/elementwise.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {

std::vector<int> normalize_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  std::vector<int> out;
  for (int64_t d : dims) {
    int nd = normalize_dim(d, x.dim(), op);
    LIBAI_CHECK(std::find(out.begin(), out.end(), nd) == out.end(), op, ": dim ", d,
                " repeated in ", str_cat(dims));
    out.push_back(nd);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int>& dims, bool keepdim) {
  Shape out;
  for (int d = 0; d < int(shape.size()); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  std::vector<int> nd = normalize_dims(x, dims, "sum");
  Shape keep_shape = reduced_shape(x.shape(), nd, true);
  Tensor out = Tensor::empty(keep_shape, x.dtype(), x.device());
  kernel<reduce_sum_slot>(x.device())(x, nd, out);
  if (!keepdim)
    out = out.as_strided(reduced_shape(x.shape(), nd, false),
                         contiguous_strides(reduced_shape(x.shape(), nd, false)), 0);
  Shape in_shape = x.shape();
  return autograd::record(out, "sum", {x}, [in_shape, keep_shape](const Tensor& g) {
    Tensor gk = g.as_strided(keep_shape, contiguous_strides(keep_shape), g.offset());
    if (!g.is_contiguous())
      gk = g.clone_raw().as_strided(keep_shape, contiguous_strides(keep_shape), 0);
    Tensor expanded = expand_view(gk, in_shape);
    return std::vector<Tensor>{expanded.clone_raw()};
  });
}

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  std::vector<int> nd = normalize_dims(x, dims, "mean");
  int64_t count = 1;
  for (int d : nd) count *= x.shape()[d];
  return scale(sum(x, dims, keepdim), 1.0 / double(count));
}

Tensor sum_all(const Tensor& x) {
  std::vector<int64_t> dims(x.dim());
  for (int d = 0; d < x.dim(); ++d) dims[d] = d;
  return sum(x, dims, false);
}

Tensor mean_all(const Tensor& x) {
  std::vector<int64_t> dims(x.dim());
  for (int d = 0; d < x.dim(); ++d) dims[d] = d;
  return mean(x, dims, false);
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  int d = normalize_dim(dim, x.dim(), "max");
  Shape keep_shape = reduced_shape(x.shape(), {d}, true);
  Tensor values = Tensor::empty(keep_shape, x.dtype(), x.device());
  Tensor indices = Tensor::empty(keep_shape, DType::i64, x.device());
  kernel<reduce_max_slot>(x.device())(x, d, values, indices);
  Shape out_shape = reduced_shape(x.shape(), {d}, keepdim);
  values = values.as_strided(out_shape, contiguous_strides(out_shape), 0);
  indices = indices.as_strided(out_shape, contiguous_strides(out_shape), 0);
  Shape in_shape = x.shape();
  Tensor idx = indices;
  values = autograd::record(values, "max", {x}, [in_shape, keep_shape, d, idx](const Tensor& g) {
    // Scatter g to the arg-max positions (CPU; the CUDA path adds its own kernel later).
    Tensor gx = Tensor::zeros(in_shape, g.dtype(), g.device());
    Tensor gc = g.is_contiguous() ? g : g.clone_raw();
    auto idx_v = idx.to_vector<int64_t>();
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; ++i) outer *= in_shape[i];
    for (int i = d + 1; i < int(in_shape.size()); ++i) inner *= in_shape[i];
    int64_t n = in_shape[d];
    dispatch_floating(g.dtype(), "max backward", [&]<typename T>() {
      const T* src = gc.data<T>();
      T* dst = gx.data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i)
          dst[(o * n + idx_v[o * inner + i]) * inner + i] = src[o * inner + i];
    });
    return std::vector<Tensor>{gx};
  });
  return {values, indices};
}

Tensor max_all(const Tensor& x) {
  LIBAI_CHECK(x.numel() > 0, "max_all: empty tensor");
  // One dim at a time: each max records its own backward, so the graph stays intact.
  Tensor out = x;
  while (out.dim() > 0) out = max(out, -1).first;
  return out;
}

}  // namespace libai::ops
