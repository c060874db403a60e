// Registers the CUDA kernels of ops/norm.h (compute in ops/cuda/norm.cu).
#include "ops/norm.h"

#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"

namespace libai::ops::cuda {
namespace {

const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* ptr_or_null(Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

void norm_forward_cuda(NormKind kind, const Tensor& x, const Tensor& weight, const Tensor& bias,
                       double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  const int code = float_code(x.dtype(), "norm");
  const int64_t hidden = x.shape().back();
  const int64_t rows = hidden == 0 ? 0 : x.numel() / hidden;
  OnDevice on(y);
  launch_norm_forward(code, kind == NormKind::layer, y.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
                      x.data_ptr(), ptr_or_null(weight), ptr_or_null(bias), rows, hidden, eps,
                      on.stream);
  on.check_launch("norm kernel");
}

void norm_backward_cuda(NormKind kind, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& grad, Tensor& grad_x, Tensor& grad_weight,
                        Tensor& grad_bias) {
  const int code = float_code(x.dtype(), "norm backward");
  const int64_t hidden = x.shape().back();
  const int64_t rows = hidden == 0 ? 0 : x.numel() / hidden;
  OnDevice on(grad_x);
  launch_norm_backward(code, kind == NormKind::layer, grad_x.data_ptr(), ptr_or_null(grad_weight),
                       ptr_or_null(grad_bias), x.data_ptr(), ptr_or_null(weight), mean.data_ptr(),
                       rstd.data_ptr(), grad.data_ptr(), rows, hidden, on.stream);
  on.check_launch("norm backward kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(norm_forward, DeviceType::cuda, norm_forward_cuda);
LIBAI_REGISTER_KERNEL(norm_backward, DeviceType::cuda, norm_backward_cuda);

}  // namespace libai::ops::cuda
