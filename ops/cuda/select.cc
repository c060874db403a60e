// Registers the CUDA kernels of ops/select.h: where and comparisons (compute in
// ops/cuda/select.cu), argmax and top-k (ops/cuda/topk.cu).
#include "ops/select.h"

#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"

namespace libai::ops::cuda {
namespace {

using libai::cuda::make_layout;

void where_forward_cuda(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  LIBAI_CHECK(cond.element_size() == 1, "where: cond must be bool or u8, got ", cond.dtype());
  const auto layout = make_layout<4>(
      out.shape(), {out.strides(), cond.strides(), a.strides(), b.strides()}, "where");
  OnDevice on(out);
  const bool ok =
      launch_where(out.element_size(), out.data_ptr(), static_cast<const uint8_t*>(cond.data_ptr()),
                   a.data_ptr(), b.data_ptr(), layout, on.stream);
  LIBAI_CHECK_KIND(Unsupported, ok, "where: dtype ", out.dtype(), " is not supported on CUDA");
  on.check_launch("where kernel");
}

void compare_cuda(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const auto layout =
      make_layout<3>(out.shape(), {out.strides(), a.strides(), b.strides()}, "compare");
  OnDevice on(out);
  const bool ok = launch_compare(int(op), int(a.dtype()), static_cast<bool*>(out.data_ptr()),
                                 a.data_ptr(), b.data_ptr(), layout, on.stream);
  LIBAI_CHECK_KIND(Unsupported, ok, "compare: dtype ", a.dtype(), " is not supported on CUDA");
  on.check_launch("compare kernel");
}

void argmax_forward_cuda(const Tensor& x, Tensor& indices) {
  // x [outer, n, inner] -> indices [outer, inner]: the top-1 of the largest.
  LIBAI_CHECK(x.shape()[1] > 0, "argmax: dimension of size 0 in ", shape_str(x.shape()));
  OnDevice on(indices);
  const bool ok =
      launch_topk(int(x.dtype()), nullptr, static_cast<int64_t*>(indices.data_ptr()), x.data_ptr(),
                  x.shape()[0], x.shape()[1], x.shape()[2], 1, true, on.stream);
  LIBAI_CHECK_KIND(Unsupported, ok, "argmax: dtype ", x.dtype(), " is not supported on CUDA");
  on.check_launch("argmax kernel");
}

void topk_forward_cuda(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices) {
  // x [outer, n, inner] -> values, indices [outer, k, inner]
  const int code = float_code(x.dtype(), "topk");
  OnDevice on(values);
  launch_topk(code, values.data_ptr(), static_cast<int64_t*>(indices.data_ptr()), x.data_ptr(),
              x.shape()[0], x.shape()[1], x.shape()[2], k, largest, on.stream);
  on.check_launch("topk kernel");
}

void topk_backward_cuda(const Tensor& grad, const Tensor& indices, Tensor& grad_x) {
  // grad, indices [outer, k, inner] -> grad_x [outer, n, inner] (zero-filled)
  float_code(grad.dtype(), "topk backward");
  OnDevice on(grad_x);
  launch_topk_backward(grad.element_size(), grad_x.data_ptr(), grad.data_ptr(),
                       static_cast<const int64_t*>(indices.data_ptr()), grad.shape()[0],
                       grad.shape()[1], grad.shape()[2], grad_x.shape()[1], on.stream);
  on.check_launch("topk backward kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(argmax_forward, DeviceType::cuda, argmax_forward_cuda);
LIBAI_REGISTER_KERNEL(topk_forward, DeviceType::cuda, topk_forward_cuda);
LIBAI_REGISTER_KERNEL(topk_backward, DeviceType::cuda, topk_backward_cuda);
LIBAI_REGISTER_KERNEL(where_forward, DeviceType::cuda, where_forward_cuda);
LIBAI_REGISTER_KERNEL(compare, DeviceType::cuda, compare_cuda);

}  // namespace libai::ops::cuda
