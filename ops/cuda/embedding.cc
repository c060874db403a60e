// Registers the CUDA kernels of ops/embedding.h (compute in ops/cuda/embedding.cu). Ids stay
// on the device: the gather flags the first out-of-range position, and the host reads the
// flag (one synchronisation) to raise InvalidArgument.
#include "ops/embedding.h"

#include <cstdint>

#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"

namespace libai::ops::cuda {
namespace {

bool ids_are_i64(const Tensor& ids) {
  LIBAI_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32,
              "index_select: ids must be i64 or i32, got ", ids.dtype());
  return ids.dtype() == DType::i64;
}

void index_select_forward_cuda(const Tensor& x, const Tensor& ids, Tensor& out) {
  // x [outer, n, inner], ids [k], out [outer, k, inner]
  const int64_t outer = x.shape()[0], n = x.shape()[1], inner = x.shape()[2];
  const int64_t k = ids.numel();
  const bool i64 = ids_are_i64(ids);
  OnDevice on(out);
  Tensor flag = Tensor::empty({1}, DType::i64, out.device());
  auto* bad = static_cast<unsigned long long*>(flag.data_ptr());
  libai::cuda::check(cudaMemsetAsync(bad, 0xff, sizeof(*bad), on.stream), "index_select flag");
  launch_index_select(x.element_size(), out.data_ptr(), x.data_ptr(), ids.data_ptr(), i64, outer, n,
                      k, inner, bad, on.stream);
  on.check_launch("index_select kernel");
  unsigned long long position = 0;
  libai::cuda::check(
      cudaMemcpyAsync(&position, bad, sizeof(position), cudaMemcpyDeviceToHost, on.stream),
      "index_select flag read");
  libai::cuda::check(cudaStreamSynchronize(on.stream), "index_select sync");
  if (position == ~0ull) return;
  int64_t id = 0;
  const char* at = static_cast<const char*>(ids.data_ptr()) + position * ids.element_size();
  if (i64) {
    libai::cuda::check(cudaMemcpy(&id, at, sizeof(id), cudaMemcpyDeviceToHost),
                       "index_select id read");
  } else {
    int32_t id32 = 0;
    libai::cuda::check(cudaMemcpy(&id32, at, sizeof(id32), cudaMemcpyDeviceToHost),
                       "index_select id read");
    id = id32;
  }
  LIBAI_CHECK(false, "index_select/embedding: id ", id, " at position ", position, " of ids ",
              shape_str(ids.shape()), " is out of range for ", n, " rows (valid: 0..", n - 1, ")");
}

void index_add_backward_cuda(const Tensor& grad, const Tensor& ids, int64_t skip_id,
                             Tensor& grad_x) {
  // grad [outer, k, inner] -> grad_x [outer, n, inner] (zero-filled)
  const int code = float_code(grad.dtype(), "embedding backward");
  const int64_t outer = grad.shape()[0], k = grad.shape()[1], inner = grad.shape()[2];
  const int64_t n = grad_x.shape()[1];
  const bool i64 = ids_are_i64(ids);
  OnDevice on(grad_x);
  Tensor scratch;  // f32 accumulator for the 16-bit dtypes
  float* acc = nullptr;
  if (grad.element_size() == 2 && outer * k * inner > 0) {
    scratch = Tensor::empty({outer * n * inner}, DType::f32, grad_x.device());
    acc = static_cast<float*>(scratch.data_ptr());
    libai::cuda::check(cudaMemsetAsync(acc, 0, scratch.nbytes(), on.stream), "embedding scratch");
  }
  launch_index_add(code, grad_x.data_ptr(), acc, grad.data_ptr(), ids.data_ptr(), i64, skip_id,
                   outer, n, k, inner, on.stream);
  on.check_launch("embedding backward kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(index_select_forward, DeviceType::cuda, index_select_forward_cuda);
LIBAI_REGISTER_KERNEL(index_add_backward, DeviceType::cuda, index_add_backward_cuda);

}  // namespace libai::ops::cuda
