// CUDA kernels of ops/norm.h. Forward and the input gradient: one block per row, statistics
// as block reductions in the compute type, two passes over the row (mean, then the centred
// sum of squares) as on the CPU. The weight/bias gradients: one thread per column summing
// over the rows in order, so the result is deterministic (no atomics).
#include <cmath>

#include "ops/cuda/launchers.h"
#include "ops/cuda/row_launch.cuh"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::blocks_for;
using libai::cuda::compute_type;
using libai::cuda::load;
using libai::cuda::store;

// Sums v over the block; every thread gets the result.
template <typename C>
__device__ C block_sum(C v, C* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
    __syncthreads();
  }
  const C result = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return result;
}

template <typename T>
__global__ void norm_forward_kernel(bool layer, T* y, compute_type<T>* mean, compute_type<T>* rstd,
                                    const T* x, const T* w, const T* b, int64_t rows,
                                    int64_t hidden, compute_type<T> eps) {
  using C = compute_type<T>;
  __shared__ C scratch[kMaxThreads];
  const C inv_n = C(1) / C(hidden);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // x, y: [rows, hidden]
    const T* xr = x + r * hidden;
    T* yr = y + r * hidden;
    C m = 0;
    if (layer) {
      C s = 0;
      for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) s += load(xr[j]);
      m = block_sum(s, scratch) * inv_n;
    }
    C sq = 0;
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
      const C d = C(load(xr[j])) - m;
      sq += d * d;
    }
    const C s = C(1) / sqrt(block_sum(sq, scratch) * inv_n + eps);
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
      C v = (C(load(xr[j])) - m) * s;
      if (w) v *= C(load(w[j]));
      if (b) v += C(load(b[j]));
      yr[j] = store<T>(v);
    }
  }
}

// dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)), gy = g * w; rms has no mean(gy) term.
template <typename T>
__global__ void norm_backward_kernel(bool layer, T* grad_x, const T* x, const T* w,
                                     const compute_type<T>* mean, const compute_type<T>* rstd,
                                     const T* grad, int64_t rows, int64_t hidden) {
  using C = compute_type<T>;
  __shared__ C scratch[kMaxThreads];
  const C inv_n = C(1) / C(hidden);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // x, grad, grad_x: [rows, hidden]
    const T* xr = x + r * hidden;
    const T* gr = grad + r * hidden;
    T* dxr = grad_x + r * hidden;
    const C m = layer ? mean[r] : C(0), s = rstd[r];
    C sum_gy = 0, sum_gyx = 0;
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
      const C gy = w ? C(load(gr[j])) * C(load(w[j])) : C(load(gr[j]));
      sum_gy += gy;
      sum_gyx += gy * (C(load(xr[j])) - m) * s;
    }
    const C a = layer ? block_sum(sum_gy, scratch) * inv_n : C(0);
    const C c = block_sum(sum_gyx, scratch) * inv_n;
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
      const C gy = w ? C(load(gr[j])) * C(load(w[j])) : C(load(gr[j]));
      const C xhat = (C(load(xr[j])) - m) * s;
      dxr[j] = store<T>(s * (gy - a - xhat * c));
    }
  }
}

// grad_weight[j] = sum_r g[r, j] * xhat[r, j]; grad_bias[j] = sum_r g[r, j].
template <typename T>
__global__ void norm_param_grad_kernel(bool layer, T* grad_w, T* grad_b, const T* x,
                                       const compute_type<T>* mean, const compute_type<T>* rstd,
                                       const T* grad, int64_t rows, int64_t hidden) {
  using C = compute_type<T>;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < hidden;
       j += int64_t(gridDim.x) * blockDim.x) {
    C sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {  // coalesced: neighbouring threads read neighbours
      const C g = load(grad[r * hidden + j]);
      const C m = layer ? mean[r] : C(0);
      sw += g * (C(load(x[r * hidden + j])) - m) * rstd[r];
      sb += g;
    }
    if (grad_w) grad_w[j] = store<T>(sw);
    if (grad_b) grad_b[j] = store<T>(sb);
  }
}

}  // namespace

void launch_norm_forward(int dtype, bool layer, void* y, void* mean, void* rstd, const void* x,
                         const void* weight, const void* bias, int64_t rows, int64_t hidden,
                         double eps, cudaStream_t stream) {
  if (rows == 0 || hidden == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    norm_forward_kernel<T><<<grid_for(rows), threads_for(hidden), 0, stream>>>(
        layer, static_cast<T*>(y), static_cast<C*>(mean), static_cast<C*>(rstd),
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), rows,
        hidden, C(eps));
  });
}

void launch_norm_backward(int dtype, bool layer, void* grad_x, void* grad_weight, void* grad_bias,
                          const void* x, const void* weight, const void* mean, const void* rstd,
                          const void* grad, int64_t rows, int64_t hidden, cudaStream_t stream) {
  if (hidden == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    if (rows > 0)
      norm_backward_kernel<T><<<grid_for(rows), threads_for(hidden), 0, stream>>>(
          layer, static_cast<T*>(grad_x), static_cast<const T*>(x), static_cast<const T*>(weight),
          static_cast<const C*>(mean), static_cast<const C*>(rstd), static_cast<const T*>(grad),
          rows, hidden);
    if (grad_weight || grad_bias)
      norm_param_grad_kernel<T><<<blocks_for(hidden, 256), 256, 0, stream>>>(
          layer, static_cast<T*>(grad_weight), static_cast<T*>(grad_bias), static_cast<const T*>(x),
          static_cast<const C*>(mean), static_cast<const C*>(rstd), static_cast<const T*>(grad),
          rows, hidden);
  });
}

}  // namespace libai::ops::cuda
