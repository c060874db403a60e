// Per-device CUDA state: the current stream and a cuBLAS handle, both created on first use
// (never at static initialisation, so a process without a GPU never touches the driver
// unless it asks for a CUDA device).
//
//   cuda::DeviceGuard guard(x.device().index);       // makes cuda:N current, restores after
//   cudaStream_t s = cuda::current_stream(x.device().index);
//   my_kernel<<<blocks, threads, 0, s>>>(...);
//   cuda::check(cudaGetLastError(), "my_kernel");
//   cublasHandle_t h = cuda::cublas_handle(index);   // bound to current_stream(index)
//
// Note [One stream per device]
// All kernels, copies and cuBLAS calls of a device go to its current stream, so they run in
// issue order. The caching allocator relies on this: a block freed on the host may be
// handed to the next kernel at once, because that kernel is queued after every kernel that
// used the block. Work on other streams must synchronise before its memory is freed.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace libai::cuda {

// Throws when status is an error: Unsupported when no usable GPU or driver is present,
// IoError when device memory is exhausted, InternalError otherwise; `what` names the call.
void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);

// Throws InvalidArgument unless 0 <= index < the number of CUDA devices.
void check_device_index(int index);

class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

cudaStream_t current_stream(int index);
// Replaces the current stream of a device (e.g. with one a communicator owns); the caller
// keeps ownership of `stream` and must keep it alive while it is current.
void set_current_stream(int index, cudaStream_t stream);
void synchronize(int index);

// Throws Unsupported with the cuBLAS status when the handle cannot be created.
cublasHandle_t cublas_handle(int index);

}  // namespace libai::cuda
