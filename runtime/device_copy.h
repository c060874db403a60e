// Moving tensors between devices. The CUDA backend registers the copy routine it provides;
// a build without CUDA reports cross-device copies as Unsupported.
//
//   Tensor g = to_device(x, Device::cuda(0));
//   Tensor h = to_device(g, Device::cpu());
#pragma once

#include "runtime/tensor.h"

namespace libai {

// dst and src have the same shape; at least one of them is not on the CPU.
using DeviceCopyFn = void (*)(Tensor& dst, const Tensor& src);
void register_device_copy(DeviceCopyFn fn);
void copy_across_devices(Tensor& dst, const Tensor& src);

Tensor to_device(const Tensor& src, Device device);
// A copy with another dtype (same device).
Tensor to_dtype(const Tensor& src, DType dtype);

}  // namespace libai
