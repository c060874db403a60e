// cuda_available() / cuda_device_count() for a build without the CUDA backend; the CUDA
// build defines them in runtime/cuda/cuda_device.cc (this file is always compiled).
#include "runtime/device.h"

#ifndef LIBAI_HAVE_CUDA
namespace libai {

bool cuda_available() { return false; }
int cuda_device_count() { return 0; }

}  // namespace libai
#endif
