// CUDA kernels of ops/embedding.h. The gather moves elements by their size (any dtype) and
// records the first position whose id is out of range in a device flag, which the host reads
// after the launch. The scatter-add backward uses atomicAdd: directly for f32/f64, through an
// f32 accumulator for bf16/f16 (their atomics would round at every addition). Repeated ids
// therefore add in an unspecified order: the sums agree with the CPU's up to rounding.
#include <cstdint>

#include "ops/cuda/launchers.h"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::blocks_for;
using libai::cuda::compute_type;
using libai::cuda::load;
using libai::cuda::store;

constexpr int kThreads = 256;

template <typename W, typename I>
__global__ void index_select_kernel(W* out, const W* x, const I* ids, int64_t outer, int64_t n,
                                    int64_t k, int64_t inner, unsigned long long* bad) {
  const int64_t total = outer * k * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {  // out: [outer, k, inner]
    const int64_t h = i % inner, j = (i / inner) % k, o = i / (inner * k);
    const int64_t id = int64_t(ids[j]);
    if (id < 0 || id >= n) {
      atomicMin(bad, (unsigned long long)j);
      out[i] = W(0);
      continue;
    }
    out[i] = x[(o * n + id) * inner + h];  // x: [outer, n, inner]
  }
}

// acc (A = T for f32/f64, float for bf16/f16) [outer, n, inner] += grad [outer, k, inner].
template <typename T, typename A, typename I>
__global__ void index_add_kernel(A* acc, const T* grad, const I* ids, int64_t skip_id,
                                 int64_t outer, int64_t n, int64_t k, int64_t inner) {
  const int64_t total = outer * k * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = i % inner, j = (i / inner) % k, o = i / (inner * k);
    const int64_t id = int64_t(ids[j]);
    if (id == skip_id || id < 0 || id >= n) continue;
    atomicAdd(acc + (o * n + id) * inner + h, A(load(grad[i])));
  }
}

template <typename T>
__global__ void add_from_f32_kernel(T* out, const float* acc, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = store<T>(load(out[i]) + acc[i]);
}

template <typename I>
void select_by_size(size_t element_size, void* out, const void* x, const I* ids, int64_t outer,
                    int64_t n, int64_t k, int64_t inner, unsigned long long* bad,
                    cudaStream_t stream) {
  const unsigned blocks = blocks_for(outer * k * inner, kThreads);
  auto run = [&](auto word) {
    using W = decltype(word);
    index_select_kernel<W, I><<<blocks, kThreads, 0, stream>>>(
        static_cast<W*>(out), static_cast<const W*>(x), ids, outer, n, k, inner, bad);
  };
  switch (element_size) {
    case 1: run(uint8_t{}); break;
    case 2: run(uint16_t{}); break;
    case 4: run(uint32_t{}); break;
    case 8: run(uint64_t{}); break;
  }
}

}  // namespace

void launch_index_select(size_t element_size, void* out, const void* x, const void* ids,
                         bool ids_i64, int64_t outer, int64_t n, int64_t k, int64_t inner,
                         unsigned long long* bad, cudaStream_t stream) {
  if (outer * k * inner == 0) return;
  if (ids_i64)
    select_by_size(element_size, out, x, static_cast<const int64_t*>(ids), outer, n, k, inner, bad,
                   stream);
  else
    select_by_size(element_size, out, x, static_cast<const int32_t*>(ids), outer, n, k, inner, bad,
                   stream);
}

void launch_index_add(int dtype, void* grad_x, float* scratch, const void* grad, const void* ids,
                      bool ids_i64, int64_t skip_id, int64_t outer, int64_t n, int64_t k,
                      int64_t inner, cudaStream_t stream) {
  if (outer * k * inner == 0) return;
  const unsigned blocks = blocks_for(outer * k * inner, kThreads);
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto run = [&](auto id_tag) {
      using I = decltype(id_tag);
      const I* id = static_cast<const I*>(ids);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        index_add_kernel<T, T, I><<<blocks, kThreads, 0, stream>>>(
            static_cast<T*>(grad_x), static_cast<const T*>(grad), id, skip_id, outer, n, k, inner);
      } else {
        index_add_kernel<T, float, I><<<blocks, kThreads, 0, stream>>>(
            scratch, static_cast<const T*>(grad), id, skip_id, outer, n, k, inner);
        const int64_t total = outer * n * inner;
        add_from_f32_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
            static_cast<T*>(grad_x), scratch, total);
      }
    };
    if (ids_i64)
      run(int64_t{});
    else
      run(int32_t{});
  });
}

}  // namespace libai::ops::cuda
