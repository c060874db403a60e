// Reductions over a set of dimensions, differentiable.
//
//   Tensor s = ops::sum(x, {-1}, /*keepdim=*/true);   // [b, s, 1]
//   Tensor m = ops::mean(x, {0, 1});
//   Tensor t = ops::sum_all(x);                       // shape []
//   auto [values, indices] = ops::max(x, -1);
#pragma once

#include <utility>
#include <vector>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false);
Tensor sum_all(const Tensor& x);
Tensor mean_all(const Tensor& x);
// Maximum along one dim; the gradient flows to the (first) arg-max.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max_all(const Tensor& x);

// x viewed as [outer, reduced, inner] after permuting the reduced dims together;
// out is [outer, inner], contiguous. Accumulates in f64 for f64, else f32.
LIBAI_KERNEL_SLOT(reduce_sum, void(const Tensor& x, const std::vector<int>& dims, Tensor& out));
LIBAI_KERNEL_SLOT(reduce_max, void(const Tensor& x, int dim, Tensor& values, Tensor& indices));

}  // namespace libai::ops
