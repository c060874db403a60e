// Registers the CUDA kernels of ops/activation.h (compute in ops/cuda/activation.cu).
#include "ops/activation.h"
#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"

namespace libai::ops::cuda {
namespace {

static_assert(int(UnaryOp::relu) == 0 && int(UnaryOp::gelu_erf) == 1 && int(UnaryOp::silu) == 3 &&
                  int(UnaryOp::pow) == 10,
              "activation.cu's Op codes follow ops::UnaryOp");

void unary_cuda(UnaryOp op, double param, const Tensor& x, Tensor& out) {
  const int code = float_code(x.dtype(), "unary");
  OnDevice on(out);
  launch_unary(int(op), code, param, out.data_ptr(), x.data_ptr(), x.numel(), on.stream);
  on.check_launch("unary kernel");
}

void unary_backward_cuda(UnaryOp op, double param, const Tensor& x, const Tensor& y,
                         const Tensor& grad, Tensor& grad_in) {
  const int code = float_code(grad.dtype(), "unary backward");
  const Tensor& v = unary_backward_uses_output(op) ? y : x;
  OnDevice on(grad_in);
  launch_unary_backward(int(op), code, param, grad_in.data_ptr(), v.data_ptr(), grad.data_ptr(),
                        grad.numel(), on.stream);
  on.check_launch("unary backward kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(unary, DeviceType::cuda, unary_cuda);
LIBAI_REGISTER_KERNEL(unary_backward, DeviceType::cuda, unary_backward_cuda);

}  // namespace libai::ops::cuda
