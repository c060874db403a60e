// Registers the CUDA kernels of ops/softmax.h (compute in ops/cuda/softmax.cu).
#include "ops/softmax.h"
#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"

namespace libai::ops::cuda {
namespace {

void softmax_forward_cuda(const Tensor& x, const SoftmaxArgs& args, Tensor& out) {
  const int code = float_code(x.dtype(), "softmax");
  const int64_t cols = x.dim() == 0 ? 1 : x.shape().back();
  const int64_t rows_total = cols == 0 ? 0 : x.numel() / cols;
  const uint8_t* mask = nullptr;
  if (args.key_padding_mask.defined()) {
    LIBAI_CHECK_KIND(Unsupported, args.key_padding_mask.element_size() == 1,
                     "softmax: the CUDA kernel takes a bool/u8 key_padding_mask, got ",
                     args.key_padding_mask.dtype());
    mask = static_cast<const uint8_t*>(args.key_padding_mask.data_ptr());
  }
  OnDevice on(out);
  launch_softmax_forward(code, out.data_ptr(), x.data_ptr(), rows_total, cols, args.log,
                         args.causal, args.rows, args.rows_per_batch, mask, on.stream);
  on.check_launch("softmax kernel");
}

void softmax_backward_cuda(const Tensor& y, const Tensor& grad, bool log, Tensor& grad_in) {
  const int code = float_code(y.dtype(), "softmax backward");
  const int64_t cols = y.dim() == 0 ? 1 : y.shape().back();
  const int64_t rows_total = cols == 0 ? 0 : y.numel() / cols;
  OnDevice on(grad_in);
  launch_softmax_backward(code, grad_in.data_ptr(), y.data_ptr(), grad.data_ptr(), rows_total, cols,
                          log, on.stream);
  on.check_launch("softmax backward kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(softmax_forward, DeviceType::cuda, softmax_forward_cuda);
LIBAI_REGISTER_KERNEL(softmax_backward, DeviceType::cuda, softmax_backward_cuda);

}  // namespace libai::ops::cuda
