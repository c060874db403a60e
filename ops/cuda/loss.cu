// CUDA kernels of ops/loss.h: one block per row, max / sum of exponentials / sum of logits
// as block reductions in the compute type, as in ops/cpu/loss.cc. The forward counts the rows
// not ignored and records the first out-of-range target in device words the host reads.
#include <cmath>
#include <cstdint>

#include "ops/cuda/launchers.h"
#include "ops/cuda/row_launch.cuh"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::compute_type;
using libai::cuda::load;
using libai::cuda::store;

// words[0]: rows not ignored; words[1]: smallest row with an invalid target (starts at ~0).
template <typename T>
__global__ void ce_forward_kernel(compute_type<T>* losses, compute_type<T>* lse, const T* x,
                                  const int64_t* target, int64_t rows, int64_t classes,
                                  int64_t ignore_index, compute_type<T> eps,
                                  unsigned long long* words) {
  using C = compute_type<T>;
  __shared__ C scratch[kMaxThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // x: [rows, classes]
    const int64_t t = target[r];
    if (t == ignore_index || t < 0 || t >= classes) {
      if (threadIdx.x == 0) {
        losses[r] = lse[r] = C(0);
        if (t != ignore_index) atomicMin(words + 1, (unsigned long long)r);
      }
      continue;
    }
    const T* xr = x + r * classes;
    C m = -INFINITY;
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
      const C v = load(xr[j]);
      m = v > m ? v : m;
    }
    m = block_reduce<true>(m, scratch);
    C s = 0, total = 0;
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
      const C v = load(xr[j]);
      s += exp(v - m);
      total += v;
    }
    s = block_reduce<false>(s, scratch);
    if (eps != C(0)) total = block_reduce<false>(total, scratch);
    if (threadIdx.x == 0) {
      const C log_sum = m + C(::log(s));
      lse[r] = log_sum;
      C loss = (C(1) - eps) * (log_sum - C(load(xr[t])));
      if (eps != C(0)) loss += eps * (log_sum - total / C(classes));
      losses[r] = loss;
      atomicAdd(words, 1ull);
    }
  }
}

// grad_out: [rows] (per_row) or one value, in the compute type.
template <typename T>
__global__ void ce_backward_kernel(T* grad, const T* x, const int64_t* target,
                                   const compute_type<T>* lse, const compute_type<T>* grad_out,
                                   bool per_row, compute_type<T> scale, int64_t rows,
                                   int64_t classes, int64_t ignore_index, compute_type<T> eps) {
  using C = compute_type<T>;
  const C uniform_part = eps / C(classes);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // x, grad: [rows, classes]
    const int64_t t = target[r];
    T* orow = grad + r * classes;
    const T* xr = x + r * classes;
    const bool ignored = t == ignore_index;
    const C w = ignored ? C(0) : scale * grad_out[per_row ? r : 0];
    const C shift = lse[r];
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
      if (ignored) {
        orow[j] = store<T>(C(0));
        continue;
      }
      const C p = exp(C(load(xr[j])) - shift);
      const C target_part = j == t ? C(1) - eps : C(0);
      orow[j] = store<T>(w * (p - uniform_part - target_part));
    }
  }
}

}  // namespace

void launch_cross_entropy_forward(int dtype, void* losses, void* lse, const void* logits,
                                  const int64_t* target, int64_t rows, int64_t classes,
                                  int64_t ignore_index, double label_smoothing,
                                  unsigned long long* words, cudaStream_t stream) {
  if (rows == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    ce_forward_kernel<T><<<grid_for(rows), threads_for(classes), 0, stream>>>(
        static_cast<C*>(losses), static_cast<C*>(lse), static_cast<const T*>(logits), target, rows,
        classes, ignore_index, C(label_smoothing), words);
  });
}

void launch_cross_entropy_backward(int dtype, void* grad_logits, const void* logits,
                                   const int64_t* target, const void* lse, const void* grad_out,
                                   bool per_row, double scale, int64_t rows, int64_t classes,
                                   int64_t ignore_index, double label_smoothing,
                                   cudaStream_t stream) {
  if (rows == 0 || classes == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    ce_backward_kernel<T><<<grid_for(rows), threads_for(classes), 0, stream>>>(
        static_cast<T*>(grad_logits), static_cast<const T*>(logits), target,
        static_cast<const C*>(lse), static_cast<const C*>(grad_out), per_row, C(scale), rows,
        classes, ignore_index, C(label_smoothing));
  });
}

}  // namespace libai::ops::cuda
