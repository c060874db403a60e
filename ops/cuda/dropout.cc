// Registers the CUDA kernel of ops/dropout.h (compute in ops/cuda/dropout.cu).
#include "ops/dropout.h"

#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"

namespace libai::ops::cuda {
namespace {

void dropout_apply_cuda(const Tensor& x, double p, RngKey key, Tensor& out) {
  const int code = float_code(x.dtype(), "dropout");
  OnDevice on(out);
  launch_dropout(code, out.data_ptr(), x.data_ptr(), x.numel(), p, key.seed, key.stream, on.stream);
  on.check_launch("dropout kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(dropout_apply, DeviceType::cuda, dropout_apply_cuda);

}  // namespace libai::ops::cuda
