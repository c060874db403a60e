// CUDA kernels of ops/elementwise.h. Operands are any strided views (broadcast operands
// have stride 0); a layout that collapses to one contiguous dim takes the plain loop.
#include "ops/cuda/launchers.h"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::blocks_for;
using libai::cuda::compute_type;
using libai::cuda::load;
using libai::cuda::offsets;
using libai::cuda::store;

constexpr int kThreads = 256;

template <int Op, typename C>
__device__ __forceinline__ C apply(C x, C y) {
  if constexpr (Op == 0) return x + y;
  if constexpr (Op == 1) return x - y;
  if constexpr (Op == 2) return x * y;
  return x / y;
}

__device__ __forceinline__ int64_t first_index() {
  return blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() { return int64_t(gridDim.x) * blockDim.x; }

template <int Op, typename T>
__global__ void binary_contiguous(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_step())
    out[i] = store<T>(apply<Op>(load(a[i]), load(b[i])));
}

template <int Op, typename T>
__global__ void binary_strided(T* out, const T* a, const T* b, StridedLayout<3> layout) {
  for (int64_t i = first_index(); i < layout.numel; i += grid_step()) {
    int64_t off[3];
    offsets<3>(layout, i, off);
    out[off[0]] = store<T>(apply<Op>(load(a[off[1]]), load(b[off[2]])));
  }
}

template <typename T>
__global__ void affine_strided(T* out, const T* x, compute_type<T> factor, compute_type<T> offset,
                               StridedLayout<2> layout) {
  for (int64_t i = first_index(); i < layout.numel; i += grid_step()) {
    int64_t off[2];
    offsets<2>(layout, i, off);
    out[off[0]] = store<T>(load(x[off[1]]) * factor + offset);
  }
}

bool contiguous(const StridedLayout<3>& l) {
  return l.rank == 0 ||
         (l.rank == 1 && l.strides[0][0] == 1 && l.strides[1][0] == 1 && l.strides[2][0] == 1);
}

template <int Op, typename T>
void binary_typed(T* out, const T* a, const T* b, const StridedLayout<3>& layout,
                  cudaStream_t stream) {
  const unsigned blocks = blocks_for(layout.numel, kThreads);
  if (contiguous(layout))
    binary_contiguous<Op, T><<<blocks, kThreads, 0, stream>>>(out, a, b, layout.numel);
  else
    binary_strided<Op, T><<<blocks, kThreads, 0, stream>>>(out, a, b, layout);
}

}  // namespace

void launch_binary(int op, int dtype, void* out, const void* a, const void* b,
                   const StridedLayout<3>& layout, cudaStream_t stream) {
  if (layout.numel == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* o = static_cast<T*>(out);
    auto* x = static_cast<const T*>(a);
    auto* y = static_cast<const T*>(b);
    switch (op) {
      case 0: return binary_typed<0, T>(o, x, y, layout, stream);
      case 1: return binary_typed<1, T>(o, x, y, layout, stream);
      case 2: return binary_typed<2, T>(o, x, y, layout, stream);
      default: return binary_typed<3, T>(o, x, y, layout, stream);
    }
  });
}

void launch_affine(int dtype, void* out, const void* x, double factor, double offset,
                   const StridedLayout<2>& layout, cudaStream_t stream) {
  if (layout.numel == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    affine_strided<T><<<blocks_for(layout.numel, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(x), C(factor), C(offset), layout);
  });
}

}  // namespace libai::ops::cuda
