// Copies between host and CUDA devices and between CUDA devices, registered with
// runtime/device_copy.h. Same dtype and both sides contiguous: one cudaMemcpy. Otherwise the
// layout change and dtype conversion happen on the GPU (copy_kernels.cu) where it can, and
// through a contiguous host copy (Tensor::copy_from on the CPU) where it cannot.
#include "runtime/cuda/copy_kernels.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/device_copy.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace libai::cuda {

static_assert(int(DType::f32) == 0 && int(DType::f64) == 1 && int(DType::bf16) == 2 &&
                  int(DType::f16) == 3,
              "device_types.cuh's FloatCode must match runtime/dtype.h");

[[noreturn]] void throw_rank_unsupported(const char* what, int rank) {
  LIBAI_THROW(Unsupported, what, ": a strided layout with ", rank,
              " non-mergeable dims exceeds the CUDA kernels' limit of ", kMaxDims);
}

namespace {

bool is_floating_dtype(DType d) { return is_floating(d); }

// dst and src on the same CUDA device: one kernel. False if the conversion is not covered.
bool copy_on_device(Tensor& dst, const Tensor& src) {
  const int index = dst.device().index;
  if (dst.dtype() != src.dtype() &&
      !(is_floating_dtype(dst.dtype()) && is_floating_dtype(src.dtype())))
    return false;
  auto layout = make_layout<2>(dst.shape(), {dst.strides(), src.strides()}, "copy");
  DeviceGuard guard(index);
  cudaStream_t stream = current_stream(index);
  bool ok =
      launch_strided_copy(dst.data_ptr(), int(dst.dtype()), dst.element_size(), src.data_ptr(),
                          int(src.dtype()), src.element_size(), layout, stream);
  check(cudaGetLastError(), "strided copy kernel");
  return ok;
}

// Contiguous, same dtype, on the device of `like`.
Tensor contiguous_on(const Tensor& src, Device device) {
  Tensor out = Tensor::empty(src.shape(), src.dtype(), device);
  out.copy_from(src);
  return out;
}

void memcpy_bytes(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind, int index) {
  if (nbytes == 0) return;
  DeviceGuard guard(index);
  cudaStream_t stream = current_stream(index);
  check(cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync");
  // Host buffers are pageable and may be freed as soon as we return.
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize after copy");
}

void cuda_copy(Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  const Device dd = dst.device(), sd = src.device();
  const bool fast = dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous();

  if (dd.is_cuda() && sd.is_cpu()) {
    if (fast)
      return memcpy_bytes(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyHostToDevice,
                          dd.index);
    // Upload as it is (contiguous, its dtype), then convert and scatter on the GPU.
    Tensor host = src.is_contiguous() ? src : src.clone_raw();
    Tensor staged = Tensor::empty(src.shape(), src.dtype(), dd);
    memcpy_bytes(staged.data_ptr(), host.data_ptr(), host.nbytes(), cudaMemcpyHostToDevice,
                 dd.index);
    if (copy_on_device(dst, staged)) return;
    // A conversion the kernels lack: convert on the host instead.
    Tensor converted = Tensor::empty(src.shape(), dst.dtype());
    converted.copy_from(src);
    return cuda_copy(dst, converted);
  }

  if (dd.is_cpu() && sd.is_cuda()) {
    if (fast)
      return memcpy_bytes(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToHost,
                          sd.index);
    Tensor compact = src.is_contiguous() ? src : contiguous_on(src, sd);
    Tensor host = Tensor::empty(src.shape(), src.dtype());
    memcpy_bytes(host.data_ptr(), compact.data_ptr(), host.nbytes(), cudaMemcpyDeviceToHost,
                 sd.index);
    dst.copy_from(host);  // CPU conversion and scatter
    return;
  }

  LIBAI_ASSERT(dd.is_cuda() && sd.is_cuda());
  if (dd == sd) {
    if (copy_on_device(dst, src)) return;
    Tensor host = Tensor::empty(src.shape(), dst.dtype());
    host.copy_from(src);
    return cuda_copy(dst, host);
  }
  // Across GPUs: compact on the source, peer copy, then convert/scatter on the destination.
  Tensor compact = src.is_contiguous() ? src : contiguous_on(src, sd);
  Tensor landed = fast ? dst : Tensor::empty(src.shape(), src.dtype(), dd);
  {
    synchronize(sd.index);  // the source's producers run on its own stream
    DeviceGuard guard(dd.index);
    cudaStream_t stream = current_stream(dd.index);
    check(cudaMemcpyPeerAsync(landed.data_ptr(), dd.index, compact.data_ptr(), sd.index,
                              compact.nbytes(), stream),
          "cudaMemcpyPeerAsync");
    // The source block may be reused by its device's stream once we return.
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize after peer copy");
  }
  if (!fast) cuda_copy(dst, landed);
}

const bool registered [[maybe_unused]] = [] {
  register_device_copy(&cuda_copy);
  return true;
}();

}  // namespace
}  // namespace libai::cuda
