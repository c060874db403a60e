// Registers the CUDA kernels of ops/loss.h (compute in ops/cuda/loss.cu). Targets stay on
// the device; the forward reads back two words (rows counted, first invalid row) with one
// synchronisation, as the slot returns the count to the host.
#include "ops/loss.h"

#include <cstdint>

#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"
#include "runtime/device_copy.h"

namespace libai::ops::cuda {
namespace {

int64_t cross_entropy_forward_cuda(const Tensor& logits, const Tensor& target,
                                   const CrossEntropyOptions& options, Tensor& losses,
                                   Tensor& lse) {
  const int code = float_code(logits.dtype(), "cross_entropy");
  LIBAI_CHECK(target.dtype() == DType::i64,
              "cross_entropy: the CUDA kernel takes i64 targets, got ", target.dtype());
  const int64_t classes = logits.shape().back(), rows = target.numel();
  const auto* t = static_cast<const int64_t*>(target.data_ptr());
  OnDevice on(logits);
  Tensor flag = Tensor::empty({2}, DType::i64, logits.device());
  auto* words = static_cast<unsigned long long*>(flag.data_ptr());
  libai::cuda::check(cudaMemsetAsync(words, 0, sizeof(*words), on.stream), "cross_entropy count");
  libai::cuda::check(cudaMemsetAsync(words + 1, 0xff, sizeof(*words), on.stream),
                     "cross_entropy flag");
  launch_cross_entropy_forward(code, losses.data_ptr(), lse.data_ptr(), logits.data_ptr(), t, rows,
                               classes, options.ignore_index, options.label_smoothing, words,
                               on.stream);
  on.check_launch("cross_entropy kernel");
  unsigned long long host[2] = {0, 0};
  libai::cuda::check(cudaMemcpyAsync(host, words, sizeof(host), cudaMemcpyDeviceToHost, on.stream),
                     "cross_entropy read back");
  libai::cuda::check(cudaStreamSynchronize(on.stream), "cross_entropy sync");
  if (host[1] != ~0ull) {
    int64_t value = 0;
    libai::cuda::check(cudaMemcpy(&value, t + host[1], sizeof(value), cudaMemcpyDeviceToHost),
                       "cross_entropy target read");
    Shape position(target.shape().size());
    for (int64_t d = int64_t(position.size()) - 1, rest = int64_t(host[1]); d >= 0; --d) {
      position[d] = rest % target.shape()[d];
      rest /= target.shape()[d];
    }
    LIBAI_THROW(InvalidArgument, "cross_entropy: target value ", value, " at position ",
                shape_str(position), " is out of range [0, ", classes, ") and is not ignore_index ",
                options.ignore_index);
  }
  return int64_t(host[0]);
}

void cross_entropy_backward_cuda(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                 const Tensor& grad_out, double scale,
                                 const CrossEntropyOptions& options, Tensor& grad_logits) {
  const int code = float_code(logits.dtype(), "cross_entropy backward");
  const int64_t classes = logits.shape().back(), rows = target.numel();
  const bool per_row = grad_out.numel() == rows && options.reduction == Reduction::none;
  // The kernel reads grad_out in lse's (compute) dtype, contiguous.
  Tensor g = to_dtype(grad_out, lse.dtype());
  if (!g.is_contiguous()) g = g.clone_raw();
  OnDevice on(grad_logits);
  launch_cross_entropy_backward(code, grad_logits.data_ptr(), logits.data_ptr(),
                                static_cast<const int64_t*>(target.data_ptr()), lse.data_ptr(),
                                g.data_ptr(), per_row, scale, rows, classes, options.ignore_index,
                                options.label_smoothing, on.stream);
  on.check_launch("cross_entropy backward kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(cross_entropy_forward, DeviceType::cuda, cross_entropy_forward_cuda);
LIBAI_REGISTER_KERNEL(cross_entropy_backward, DeviceType::cuda, cross_entropy_backward_cuda);

}  // namespace libai::ops::cuda
