// CUDA kernels of ops/softmax.h: one block per row; the max, the sum of exponentials and
// the backward dot product are block reductions in the compute type. Masking follows
// ops/cpu/softmax.cc: masked entries give 0 (or -inf for log), fully masked rows never NaN.
#include <cmath>

#include "ops/cuda/launchers.h"
#include "ops/cuda/row_launch.cuh"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::compute_type;
using libai::cuda::load;
using libai::cuda::store;

template <typename T>
__global__ void softmax_forward_kernel(T* out, const T* x, int64_t rows_total, int64_t cols,
                                       bool log, bool causal, int64_t rows, int64_t rows_per_batch,
                                       const uint8_t* mask) {
  using C = compute_type<T>;
  __shared__ C scratch[kMaxThreads];
  const C masked = log ? C(-INFINITY) : C(0);
  for (int64_t r = blockIdx.x; r < rows_total; r += gridDim.x) {  // x: [rows_total, cols]
    const T* xr = x + r * cols;
    T* orow = out + r * cols;
    const uint8_t* pr = mask ? mask + (r / rows_per_batch) * cols : nullptr;
    int64_t n = cols;
    if (causal) {
      const int64_t limit = r % rows + (cols - rows) + 1;
      n = limit < 0 ? 0 : (limit > cols ? cols : limit);
    }
    auto value = [&](int64_t j) { return pr && pr[j] ? C(-INFINITY) : C(load(xr[j])); };
    C m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const C v = value(j);
      m = v > m ? v : m;
    }
    m = block_reduce<true>(m, scratch);
    if (m == C(-INFINITY)) n = 0;  // fully masked: no NaN from -inf - -inf
    C sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += exp(value(j) - m);
    sum = block_reduce<false>(sum, scratch);
    const C shift = m + (n > 0 ? C(::log(sum)) : C(0));
    const C inv = n > 0 ? C(1) / sum : C(0);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      C o = masked;
      if (j < n) o = log ? value(j) - shift : exp(value(j) - m) * inv;
      orow[j] = store<T>(o);
    }
  }
}

template <typename T>
__global__ void softmax_backward_kernel(T* grad_in, const T* y, const T* grad, int64_t rows_total,
                                        int64_t cols, bool log) {
  using C = compute_type<T>;
  __shared__ C scratch[kMaxThreads];
  for (int64_t r = blockIdx.x; r < rows_total; r += gridDim.x) {  // y, grad: [rows_total, cols]
    const T* yr = y + r * cols;
    const T* gr = grad + r * cols;
    T* orow = grad_in + r * cols;
    C acc = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C yv = load(yr[j]), gv = load(gr[j]);
      // log: sum of grad over unmasked entries; softmax: dot(grad, y).
      acc += log ? (yv == C(-INFINITY) ? C(0) : gv) : gv * yv;
    }
    acc = block_reduce<false>(acc, scratch);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C yv = load(yr[j]), gv = load(gr[j]);
      C o;
      if (log)
        o = yv == C(-INFINITY) ? C(0) : gv - exp(yv) * acc;
      else
        o = yv * (gv - acc);
      orow[j] = store<T>(o);
    }
  }
}

}  // namespace

void launch_softmax_forward(int dtype, void* out, const void* x, int64_t rows_total, int64_t cols,
                            bool log, bool causal, int64_t rows, int64_t rows_per_batch,
                            const uint8_t* mask, cudaStream_t stream) {
  if (rows_total == 0 || cols == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_kernel<T><<<grid_for(rows_total), threads_for(cols), 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(x), rows_total, cols, log, causal,
        rows < 1 ? 1 : rows, rows_per_batch < 1 ? 1 : rows_per_batch, mask);
  });
}

void launch_softmax_backward(int dtype, void* grad_in, const void* y, const void* grad,
                             int64_t rows_total, int64_t cols, bool log, cudaStream_t stream) {
  if (rows_total == 0 || cols == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<grid_for(rows_total), threads_for(cols), 0, stream>>>(
        static_cast<T*>(grad_in), static_cast<const T*>(y), static_cast<const T*>(grad), rows_total,
        cols, log);
  });
}

}  // namespace libai::ops::cuda
