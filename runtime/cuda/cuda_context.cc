#include "runtime/cuda/cuda_context.h"

#include <array>
#include <mutex>

#include "runtime/device.h"
#include "runtime/error.h"

namespace libai::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  cudaStream_t stream = nullptr;
  bool stream_ready = false;
  cublasHandle_t cublas = nullptr;
};

std::mutex g_mutex;
std::array<DeviceState, kMaxDevices> g_devices;

}  // namespace

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so that later calls do not report it again
  const char* text = cudaGetErrorString(status);
  switch (status) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      LIBAI_THROW(Unsupported, what, ": no usable CUDA device (", text, ")");
    case cudaErrorMemoryAllocation:
      LIBAI_THROW(IoError, what, ": out of device memory (", text, ")");
    default: LIBAI_THROW(InternalError, what, " failed: ", text, " (CUDA error ", int(status), ")");
  }
}

void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  if (status == CUBLAS_STATUS_ALLOC_FAILED)
    LIBAI_THROW(IoError, what, ": cuBLAS could not allocate device memory");
  LIBAI_THROW(InternalError, what, " failed: cuBLAS status ", int(status));
}

void check_device_index(int index) {
  const int count = cuda_device_count();
  LIBAI_CHECK(index >= 0 && index < count && index < kMaxDevices, "device cuda:", index,
              " requested, but this process sees ", count, " CUDA device(s)");
}

DeviceGuard::DeviceGuard(int index) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && previous_ >= 0)
    cudaSetDevice(previous_);
}

cudaStream_t current_stream(int index) {
  check_device_index(index);
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& state = g_devices[size_t(index)];
  if (!state.stream_ready) {
    DeviceGuard guard(index);
    // A blocking stream: it also orders against the legacy default stream, which plain
    // cudaMemcpy and libraries that ignore our stream use.
    check(cudaStreamCreateWithFlags(&state.stream, cudaStreamDefault), "cudaStreamCreate");
    state.stream_ready = true;
  }
  return state.stream;
}

void set_current_stream(int index, cudaStream_t stream) {
  check_device_index(index);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_devices[size_t(index)].stream = stream;
  g_devices[size_t(index)].stream_ready = true;
}

void synchronize(int index) {
  cudaStream_t stream = current_stream(index);
  DeviceGuard guard(index);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

cublasHandle_t cublas_handle(int index) {
  cudaStream_t stream = current_stream(index);
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& state = g_devices[size_t(index)];
  if (state.cublas == nullptr) {
    DeviceGuard guard(index);
    cublasStatus_t status = cublasCreate(&state.cublas);
    LIBAI_CHECK_KIND(Unsupported, status == CUBLAS_STATUS_SUCCESS,
                     "cuBLAS could not be initialised on cuda:", index, " (status ", int(status),
                     "): matmul on this device is unavailable");
  }
  check(cublasSetStream(state.cublas, stream), "cublasSetStream");
  return state.cublas;
}

}  // namespace libai::cuda
