// Launch shapes and the block-wide reduction shared by the CUDA kernels that give one block
// to each row (softmax, norms, losses, reductions, top-k).
//
//   kernel<<<grid_for(rows), threads_for(cols), 0, stream>>>(...);
//   __shared__ C scratch[kMaxThreads];
//   C row_max = block_reduce<true>(local_max, scratch);   // every thread gets the result
#pragma once

#include <cstdint>

namespace libai::ops::cuda {

inline constexpr int kMaxThreads = 256;

// Threads for a row of `cols` elements: a power of two from one warp up to kMaxThreads.
inline int threads_for(int64_t cols) {
  int t = 32;
  while (t < kMaxThreads && t < cols) t *= 2;
  return t;
}

// One block per row, capped at the grid limit (kernels stride over rows beyond it).
inline unsigned grid_for(int64_t rows) {
  return unsigned(rows < 1 ? 1 : (rows > (int64_t(1) << 30) ? (int64_t(1) << 30) : rows));
}

// Reduces v over the block (max or sum); every thread gets the result. `scratch` holds
// blockDim.x values; it is free again when this returns.
template <bool Max, typename C>
__device__ C block_reduce(C v, C* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) {
      const C o = scratch[threadIdx.x + s];
      scratch[threadIdx.x] =
          Max ? (o > scratch[threadIdx.x] ? o : scratch[threadIdx.x]) : scratch[threadIdx.x] + o;
    }
    __syncthreads();
  }
  const C result = scratch[0];
  __syncthreads();
  return result;
}

}  // namespace libai::ops::cuda
