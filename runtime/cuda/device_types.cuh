// Device-side element types: the storage types of the floating dtypes and their compute
// types (f32 for f32/bf16/f16, f64 for f64), matching ops/dispatch.h's load/store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace libai::cuda {

template <typename T>
struct compute_of {
  using type = float;
};
template <>
struct compute_of<double> {
  using type = double;
};
template <typename T>
using compute_type = typename compute_of<T>::type;

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ double load(double v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T store(compute_type<T> v);
template <>
__device__ __forceinline__ float store<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ double store<double>(double v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half store<__half>(float v) {
  return __float2half_rn(v);
}

// The value to compare: integers as they are, floating types as their compute type.
template <typename T>
__device__ __forceinline__ auto value_of(T v) {
  if constexpr (std::is_integral_v<T>)
    return v;
  else
    return load(v);
}

// The DType codes of runtime/dtype.h for the floating types (checked by a static_assert in
// runtime/cuda/cuda_copy.cc).
enum FloatCode : int { kF32 = 0, kF64 = 1, kBF16 = 2, kF16 = 3 };

// Calls fn(T{}) with the storage type of a floating dtype code; returns false otherwise.
template <typename Fn>
bool dispatch_float_code(int code, Fn&& fn) {
  switch (code) {
    case kF32: fn(float{}); return true;
    case kF64: fn(double{}); return true;
    case kBF16: fn(__nv_bfloat16{}); return true;
    case kF16: fn(__half{}); return true;
    default: return false;
  }
}

inline unsigned blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > (int64_t(1) << 30) ? (int64_t(1) << 30) : b));
}

}  // namespace libai::cuda
