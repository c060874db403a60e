// CUDA kernels of ops/select.h's argmax and top-k: one block per output row (o, i) of
// x [outer, n, inner]. The order is total, as in ops/cpu/select.cc: NaN ranks above every
// number (for largest), then by value, ties to the lower index. Top-k takes k rounds of a
// block arg-best over the entries ranked after the previous pick, so the output is sorted;
// that costs k passes over the row, fine for the small k of sampling.
#include <cstdint>
#include <type_traits>

#include "ops/cuda/launchers.h"
#include "ops/cuda/row_launch.cuh"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::blocks_for;
using libai::cuda::load;
using libai::cuda::value_of;

template <typename V>
__device__ __forceinline__ bool nan_of(V v) {
  if constexpr (std::is_integral_v<V>)
    return false;
  else
    return v != v;
}

// Whether (va, a) ranks before (vb, b); b < 0 is "nothing", ranked last.
template <typename V>
__device__ __forceinline__ bool better(V va, int64_t a, V vb, int64_t b, bool largest) {
  if (b < 0) return a >= 0;
  if (a < 0) return false;
  const bool na = nan_of(va), nb = nan_of(vb);
  if (na != nb) return largest ? na : nb;
  if (!na && va != vb) return largest ? va > vb : va < vb;
  return a < b;
}

// Writes, for rows r of [outer * inner], the k best of x[o, :, i] in order.
template <typename T>
__global__ void topk_kernel(T* values, int64_t* indices, const T* x, int64_t outer, int64_t n,
                            int64_t inner, int64_t k, bool largest) {
  using V = decltype(value_of(T{}));
  __shared__ V sv[kMaxThreads];
  __shared__ int64_t si[kMaxThreads];
  for (int64_t r = blockIdx.x; r < outer * inner; r += gridDim.x) {
    const int64_t o = r / inner, i = r % inner;
    const T* row = x + o * n * inner + i;  // stride inner
    V prev_v{};
    int64_t prev = -1;
    for (int64_t s = 0; s < k; ++s) {
      V bv{};
      int64_t bi = -1;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const V v = value_of(row[j * inner]);
        if (prev >= 0 && !better(prev_v, prev, v, j, largest)) continue;  // already taken
        if (better(v, j, bv, bi, largest)) bv = v, bi = j;
      }
      sv[threadIdx.x] = bv;
      si[threadIdx.x] = bi;
      __syncthreads();
      for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if (int(threadIdx.x) < h && better(sv[threadIdx.x + h], si[threadIdx.x + h],
                                           sv[threadIdx.x], si[threadIdx.x], largest)) {
          sv[threadIdx.x] = sv[threadIdx.x + h];
          si[threadIdx.x] = si[threadIdx.x + h];
        }
        __syncthreads();
      }
      prev_v = sv[0];
      prev = si[0];
      __syncthreads();      // sv/si are rewritten by the next round
      if (prev < 0) break;  // k > n: nothing left (the op checks k <= n)
      if (threadIdx.x == 0) {
        const int64_t dst = (o * k + s) * inner + i;  // [outer, k, inner]
        if (values) values[dst] = row[prev * inner];
        indices[dst] = prev;
      }
    }
  }
}

// grad_x[o, indices[o, j, i], i] = grad[o, j, i]; indices distinct per row.
template <typename W>
__global__ void topk_backward_kernel(W* grad_x, const W* grad, const int64_t* indices,
                                     int64_t outer, int64_t k, int64_t inner, int64_t n) {
  const int64_t total = outer * k * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, o = t / (k * inner);
    grad_x[(o * n + indices[t]) * inner + i] = grad[t];
  }
}

template <typename Fn>
bool dispatch_any(int dtype, Fn&& fn) {
  if (libai::cuda::dispatch_float_code(dtype, fn)) return true;
  switch (dtype) {  // runtime/dtype.h: i64, i32, u8, boolean follow the floating codes
    case 4: fn(int64_t{}); return true;
    case 5: fn(int32_t{}); return true;
    case 6:
    case 7: fn(uint8_t{}); return true;
  }
  return false;
}

}  // namespace

bool launch_topk(int dtype, void* values, int64_t* indices, const void* x, int64_t outer, int64_t n,
                 int64_t inner, int64_t k, bool largest, cudaStream_t stream) {
  if (outer * inner == 0 || k == 0) return true;
  return dispatch_any(dtype, [&](auto tag) {
    using T = decltype(tag);
    topk_kernel<T><<<grid_for(outer * inner), threads_for(n), 0, stream>>>(
        static_cast<T*>(values), indices, static_cast<const T*>(x), outer, n, inner, k, largest);
  });
}

void launch_topk_backward(size_t element_size, void* grad_x, const void* grad,
                          const int64_t* indices, int64_t outer, int64_t k, int64_t inner,
                          int64_t n, cudaStream_t stream) {
  const int64_t total = outer * k * inner;
  if (total == 0) return;
  auto run = [&](auto word) {
    using W = decltype(word);
    topk_backward_kernel<W><<<blocks_for(total, 256), 256, 0, stream>>>(
        static_cast<W*>(grad_x), static_cast<const W*>(grad), indices, outer, k, inner, n);
  };
  switch (element_size) {
    case 2: run(uint16_t{}); break;
    case 4: run(uint32_t{}); break;
    case 8: run(uint64_t{}); break;
  }
}

}  // namespace libai::ops::cuda
