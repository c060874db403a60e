// Registers the CUDA kernels of ops/elementwise.h (compute in ops/cuda/elementwise.cu).
#include "ops/elementwise.h"
#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"

namespace libai::ops::cuda {
namespace {

using libai::cuda::make_layout;

void binary_cuda(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const int code = float_code(out.dtype(), "binary");
  // [out shape]: a and b are expanded views (stride 0 on broadcast dims).
  auto layout = make_layout<3>(out.shape(), {out.strides(), a.strides(), b.strides()}, "binary");
  OnDevice on(out);
  launch_binary(int(op), code, out.data_ptr(), a.data_ptr(), b.data_ptr(), layout, on.stream);
  on.check_launch("binary kernel");
}

void affine_cuda(const Tensor& x, double factor, double offset, Tensor& out) {
  const int code = float_code(out.dtype(), "affine");
  auto layout = make_layout<2>(out.shape(), {out.strides(), x.strides()}, "affine");
  OnDevice on(out);
  launch_affine(code, out.data_ptr(), x.data_ptr(), factor, offset, layout, on.stream);
  on.check_launch("affine kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(binary, DeviceType::cuda, binary_cuda);
LIBAI_REGISTER_KERNEL(affine, DeviceType::cuda, affine_cuda);

}  // namespace libai::ops::cuda
