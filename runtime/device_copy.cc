#include "runtime/device_copy.h"

namespace libai {
namespace {
DeviceCopyFn g_copy = nullptr;
}

void register_device_copy(DeviceCopyFn fn) { g_copy = fn; }

void copy_across_devices(Tensor& dst, const Tensor& src) {
  LIBAI_CHECK_KIND(Unsupported, g_copy != nullptr, "copy from ", src.device(), " to ", dst.device(),
                   ": this build of LiBai-Actor has no CUDA backend");
  g_copy(dst, src);
}

Tensor to_device(const Tensor& src, Device device) {
  if (src.device() == device) return src;
  Tensor out = Tensor::empty(src.shape(), src.dtype(), device);
  out.copy_from(src);
  return out;
}

Tensor to_dtype(const Tensor& src, DType dtype) {
  if (src.dtype() == dtype) return src;
  Tensor out = Tensor::empty(src.shape(), dtype, src.device());
  out.copy_from(src);
  return out;
}

}  // namespace libai
