// CUDA kernels of ops/reduce.h: one block per output element; its threads stride over the
// reduced elements and combine through shared memory. Sums accumulate in the compute type
// (f64 for f64, else f32); the max keeps the first arg-max, and NaN wins, as on the CPU.
#include "ops/cuda/launchers.h"
#include "ops/cuda/row_launch.cuh"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::compute_type;
using libai::cuda::load;
using libai::cuda::offsets;
using libai::cuda::store;

template <typename T>
__global__ void reduce_sum_kernel(T* out, const T* x, StridedLayout<2> kept,
                                  StridedLayout<1> reduced) {
  using C = compute_type<T>;
  __shared__ C partial[kMaxThreads];
  for (int64_t j = blockIdx.x; j < kept.numel; j += gridDim.x) {
    int64_t base[2];
    offsets<2>(kept, j, base);
    C acc = 0;
    for (int64_t r = threadIdx.x; r < reduced.numel; r += blockDim.x) {
      int64_t off[1];
      offsets<1>(reduced, r, off);
      acc += load(x[base[0] + off[0]]);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (int(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[base[1]] = store<T>(partial[0]);
    __syncthreads();
  }
}

// (value, index) pairs: NaN beats numbers, then larger beats smaller, then lower index.
template <typename C>
__device__ __forceinline__ bool better(C v, int64_t i, C best, int64_t best_i) {
  if (best_i < 0) return true;
  if (i < 0) return false;
  const bool vn = v != v, bn = best != best;
  if (vn != bn) return vn;
  if (!vn && v != best) return v > best;
  return i < best_i;
}

template <typename T>
__global__ void reduce_max_kernel(T* values, int64_t* indices, const T* x, StridedLayout<2> kept,
                                  StridedLayout<1> reduced) {
  using C = compute_type<T>;
  __shared__ C best_value[kMaxThreads];
  __shared__ int64_t best_index[kMaxThreads];
  for (int64_t j = blockIdx.x; j < kept.numel; j += gridDim.x) {
    int64_t base[2];
    offsets<2>(kept, j, base);
    C best = 0;
    int64_t arg = -1;
    for (int64_t r = threadIdx.x; r < reduced.numel; r += blockDim.x) {
      int64_t off[1];
      offsets<1>(reduced, r, off);
      const C v = load(x[base[0] + off[0]]);
      if (better(v, r, best, arg)) best = v, arg = r;
    }
    best_value[threadIdx.x] = best;
    best_index[threadIdx.x] = arg;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (int(threadIdx.x) < s && better(best_value[threadIdx.x + s], best_index[threadIdx.x + s],
                                         best_value[threadIdx.x], best_index[threadIdx.x])) {
        best_value[threadIdx.x] = best_value[threadIdx.x + s];
        best_index[threadIdx.x] = best_index[threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      values[base[1]] = store<T>(best_value[0]);
      indices[base[1]] = best_index[0];
    }
    __syncthreads();
  }
}

}  // namespace

void launch_reduce_sum(int dtype, void* out, const void* x, const StridedLayout<2>& kept,
                       const StridedLayout<1>& reduced, cudaStream_t stream) {
  if (kept.numel == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_sum_kernel<T><<<grid_for(kept.numel), threads_for(reduced.numel), 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(x), kept, reduced);
  });
}

void launch_reduce_max(int dtype, void* values, int64_t* indices, const void* x,
                       const StridedLayout<2>& kept, const StridedLayout<1>& reduced,
                       cudaStream_t stream) {
  if (kept.numel == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_max_kernel<T><<<grid_for(kept.numel), threads_for(reduced.numel), 0, stream>>>(
        static_cast<T*>(values), indices, static_cast<const T*>(x), kept, reduced);
  });
}

}  // namespace libai::ops::cuda
