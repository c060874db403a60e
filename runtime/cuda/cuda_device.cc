// cuda_available() / cuda_device_count() of the CUDA build (runtime/device_probe.cc has the
// CPU-only versions). The probe runs once, on first call: a missing driver or GPU makes
// cudaGetDeviceCount fail, which reads as "no CUDA devices", never as an error.
#include <cuda_runtime_api.h>

#include "runtime/device.h"

namespace libai {

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

bool cuda_available() { return cuda_device_count() > 0; }

}  // namespace libai
