// Registers the CUDA kernels of ops/select.h's where and comparisons (compute in
// ops/cuda/select.cu). argmax and top-k have no CUDA kernel yet.
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

}  // namespace

LIBAI_REGISTER_KERNEL(where_forward, DeviceType::cuda, where_forward_cuda);
LIBAI_REGISTER_KERNEL(compare, DeviceType::cuda, compare_cuda);

}  // namespace libai::ops::cuda
