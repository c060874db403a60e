// CUDA kernel of ops/dropout.h. The mask is runtime/rng.cc's Philox 4x32-10 evaluated per
// element on the device, so it equals the CPU's bit for bit (same key, same element index);
// the round constants and the key mixing below must stay identical to runtime/rng.cc.
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
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The first output word of philox4x32(key, counter), key already mixed into (k0, k1).
__device__ __forceinline__ uint32_t philox_word0(uint32_t k0, uint32_t k1, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(kMul0, c0), lo0 = kMul0 * c0;
    const uint32_t hi1 = __umulhi(kMul1, c2), lo1 = kMul1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c0;
}

template <typename T>
__global__ void dropout_kernel(T* out, const T* x, int64_t n, float threshold,
                               compute_type<T> scale, uint32_t k0, uint32_t k1) {
  using C = compute_type<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    // uniform(key, i) of runtime/rng.cc: 24 random bits in [0, 1).
    const float u = float(philox_word0(k0, k1, uint64_t(i)) >> 8) * (1.0f / 16777216.0f);
    out[i] = u >= threshold ? store<T>(C(load(x[i])) * scale) : store<T>(C(0));
  }
}

}  // namespace

void launch_dropout(int dtype, void* out, const void* x, int64_t n, double p, uint64_t seed,
                    uint64_t stream_key, cudaStream_t stream) {
  if (n == 0) return;
  const uint64_t k = mix64(seed) ^ stream_key;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    const C scale = p < 1.0 ? C(1.0 / (1.0 - p)) : C(0);
    dropout_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(x), n, float(p), scale, uint32_t(k),
        uint32_t(k >> 32));
  });
}

}  // namespace libai::ops::cuda
