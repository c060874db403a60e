// Shared by the .cc halves of the CUDA kernels: make a tensor's device current, get its
// stream, and check a launch.
//
//   OnDevice on(out);                          // cuda:N current until the end of the scope
//   launch_affine(code, ..., on.stream);
//   on.check_launch("affine");
#pragma once

#include "runtime/cuda/cuda_context.h"
#include "runtime/tensor.h"

namespace libai::ops::cuda {

struct OnDevice {
  explicit OnDevice(const Tensor& t)
      : index(t.device().index), guard(index), stream(libai::cuda::current_stream(index)) {}
  void check_launch(const char* what) const { libai::cuda::check(cudaGetLastError(), what); }
  int index;
  libai::cuda::DeviceGuard guard;
  cudaStream_t stream;
};

// The dtype code the .cu kernels take; Unsupported for a non-floating dtype.
inline int float_code(DType dtype, const char* op) {
  LIBAI_CHECK_KIND(Unsupported, is_floating(dtype), op, ": dtype ", dtype,
                   " is not supported on CUDA (expected a floating dtype)");
  return int(dtype);
}

}  // namespace libai::ops::cuda
