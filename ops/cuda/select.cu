// CUDA kernels of ops/select.h's where and comparisons. where moves elements by their size,
// so it covers every dtype; comparisons read floating dtypes in their compute type and the
// integer dtypes as themselves (bool and u8 as bytes), as ops/cpu/select.cc does.
#include <cstdint>

#include "ops/cuda/launchers.h"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::blocks_for;
using libai::cuda::load;
using libai::cuda::offsets;
using libai::cuda::value_of;

constexpr int kThreads = 256;

// strides: [0] out, [1] cond, [2] a, [3] b.
template <typename W>
__global__ void where_kernel(W* out, const uint8_t* cond, const W* a, const W* b,
                             StridedLayout<4> layout) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < layout.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[4];
    offsets<4>(layout, i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

// op: ops::CompareOp's value (eq, ne, lt, gt, le, ge); strides: [0] out, [1] a, [2] b.
template <typename T>
__global__ void compare_kernel(int op, bool* out, const T* a, const T* b, StridedLayout<3> layout) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < layout.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    offsets<3>(layout, i, off);
    const auto x = value_of(a[off[1]]), y = value_of(b[off[2]]);
    bool r = false;
    switch (op) {
      case 0: r = x == y; break;
      case 1: r = x != y; break;
      case 2: r = x < y; break;
      case 3: r = x > y; break;
      case 4: r = x <= y; break;
      case 5: r = x >= y; break;
    }
    out[off[0]] = r;
  }
}

}  // namespace

bool launch_where(size_t element_size, void* out, const uint8_t* cond, const void* a, const void* b,
                  const StridedLayout<4>& layout, cudaStream_t stream) {
  if (layout.numel == 0) return true;
  const unsigned blocks = blocks_for(layout.numel, kThreads);
  auto run = [&](auto word) {
    using W = decltype(word);
    where_kernel<W><<<blocks, kThreads, 0, stream>>>(
        static_cast<W*>(out), cond, static_cast<const W*>(a), static_cast<const W*>(b), layout);
  };
  switch (element_size) {
    case 1: run(uint8_t{}); return true;
    case 2: run(uint16_t{}); return true;
    case 4: run(uint32_t{}); return true;
    case 8: run(uint64_t{}); return true;
  }
  return false;
}

bool launch_compare(int op, int dtype, bool* out, const void* a, const void* b,
                    const StridedLayout<3>& layout, cudaStream_t stream) {
  if (layout.numel == 0) return true;
  const unsigned blocks = blocks_for(layout.numel, kThreads);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    compare_kernel<T><<<blocks, kThreads, 0, stream>>>(op, out, static_cast<const T*>(a),
                                                       static_cast<const T*>(b), layout);
  };
  if (libai::cuda::dispatch_float_code(dtype, run)) return true;
  switch (dtype) {  // runtime/dtype.h: i64, i32, u8, boolean follow the floating codes
    case 4: run(int64_t{}); return true;
    case 5: run(int32_t{}); return true;
    case 6:
    case 7: run(uint8_t{}); return true;
  }
  return false;
}

}  // namespace libai::ops::cuda
