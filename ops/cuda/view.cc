// Registers the CUDA kernel of ops/view.h's copy_strided: one cudaMemcpyAsync when both sides
// are contiguous, else the device strided copy of runtime/cuda/copy_kernels.h (any dtype, by
// element size).
#include "ops/view.h"

#include "ops/cuda/common.h"
#include "runtime/cuda/copy_kernels.h"

namespace libai::ops::cuda {
namespace {

void copy_strided_cuda(const Tensor& src, Tensor& dst) {
  LIBAI_ASSERT(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "copy_strided: src ",
               shape_str(src.shape()), " ", src.dtype(), " vs dst ", shape_str(dst.shape()), " ",
               dst.dtype());
  if (src.numel() == 0) return;
  OnDevice on(dst);
  if (src.is_contiguous() && dst.is_contiguous()) {
    libai::cuda::check(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(),
                                       cudaMemcpyDeviceToDevice, on.stream),
                       "copy_strided memcpy");
    return;
  }
  const auto layout =
      libai::cuda::make_layout<2>(dst.shape(), {dst.strides(), src.strides()}, "copy_strided");
  const bool ok = libai::cuda::launch_strided_copy(
      dst.data_ptr(), int(dst.dtype()), dst.element_size(), src.data_ptr(), int(src.dtype()),
      src.element_size(), layout, on.stream);
  LIBAI_ASSERT(ok, "copy_strided: no CUDA copy for dtype ", src.dtype());
  on.check_launch("copy_strided kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(copy_strided, DeviceType::cuda, copy_strided_cuda);

}  // namespace libai::ops::cuda
