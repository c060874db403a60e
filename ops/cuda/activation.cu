// CUDA kernels of ops/activation.h, with the formulas of ops/cpu/activation.cc (f32 compute
// for f32/bf16/f16, f64 for f64) so that the two backends agree to rounding.
#include <cmath>

#include "ops/cuda/launchers.h"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::blocks_for;
using libai::cuda::compute_type;
using libai::cuda::load;
using libai::cuda::store;

constexpr int kThreads = 256;
// ops::UnaryOp, in declaration order.
enum Op : int {
  kRelu,
  kGeluErf,
  kGeluTanh,
  kSilu,
  kSigmoid,
  kTanh,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kPow
};
constexpr double kGeluTanhScale = 0.7978845608028654, kGeluTanhCubic = 0.044715;
constexpr double kSqrtHalf = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794;

template <typename C>
__device__ __forceinline__ C sigmoid(C x) {
  return C(1) / (C(1) + exp(-x));
}

template <int O, typename C>
__device__ __forceinline__ C forward_value(C x, C p) {
  if constexpr (O == kRelu) return x < C(0) ? C(0) : x;
  if constexpr (O == kGeluErf) return C(0.5) * x * erfc(-x * C(kSqrtHalf));
  if constexpr (O == kGeluTanh) {
    const C u = C(kGeluTanhScale) * (x + C(kGeluTanhCubic) * x * x * x);
    return x * sigmoid(C(2) * u);  // = 0.5 x (1 + tanh u), without cancellation
  }
  if constexpr (O == kSilu) return x * sigmoid(x);
  if constexpr (O == kSigmoid) return sigmoid(x);
  if constexpr (O == kTanh) return tanh(x);
  if constexpr (O == kExp) return exp(x);
  if constexpr (O == kLog) return log(x);
  if constexpr (O == kSqrt) return sqrt(x);
  if constexpr (O == kRsqrt) return C(1) / sqrt(x);
  return pow(x, p);
}

template <int O, typename C>
__device__ __forceinline__ C derivative(C v, C p) {
  if constexpr (O == kRelu) return v > C(0) ? C(1) : C(0);
  if constexpr (O == kGeluErf)
    return C(0.5) * erfc(-v * C(kSqrtHalf)) + v * exp(C(-0.5) * v * v) * C(kInvSqrt2Pi);
  if constexpr (O == kGeluTanh) {
    const C u = C(kGeluTanhScale) * (v + C(kGeluTanhCubic) * v * v * v);
    const C du = C(kGeluTanhScale) * (C(1) + C(3 * kGeluTanhCubic) * v * v);
    const C s = sigmoid(C(2) * u);
    return s + v * C(2) * s * (C(1) - s) * du;
  }
  if constexpr (O == kSilu) {
    const C s = sigmoid(v);
    return s * (C(1) + v * (C(1) - s));
  }
  if constexpr (O == kSigmoid) return v * (C(1) - v);  // v = y
  if constexpr (O == kTanh) return C(1) - v * v;       // v = y
  if constexpr (O == kExp) return v;                   // v = y
  if constexpr (O == kLog) return C(1) / v;
  if constexpr (O == kSqrt) return C(0.5) / v;            // v = y
  if constexpr (O == kRsqrt) return C(-0.5) * v * v * v;  // v = y
  return p * pow(v, p - C(1));
}

template <int O, typename T>
__global__ void unary_kernel(T* out, const T* x, compute_type<T> p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = store<T>(forward_value<O>(load(x[i]), p));
}

template <int O, typename T>
__global__ void unary_backward_kernel(T* grad_in, const T* v, const T* grad, compute_type<T> p,
                                      int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    grad_in[i] = store<T>(load(grad[i]) * derivative<O>(load(v[i]), p));
}

template <typename Body>
void with_op(int op, Body&& body) {
  switch (op) {
    case kRelu: return body.template operator()<kRelu>();
    case kGeluErf: return body.template operator()<kGeluErf>();
    case kGeluTanh: return body.template operator()<kGeluTanh>();
    case kSilu: return body.template operator()<kSilu>();
    case kSigmoid: return body.template operator()<kSigmoid>();
    case kTanh: return body.template operator()<kTanh>();
    case kExp: return body.template operator()<kExp>();
    case kLog: return body.template operator()<kLog>();
    case kSqrt: return body.template operator()<kSqrt>();
    case kRsqrt: return body.template operator()<kRsqrt>();
    default: return body.template operator()<kPow>();
  }
}

}  // namespace

void launch_unary(int op, int dtype, double param, void* out, const void* x, int64_t n,
                  cudaStream_t stream) {
  if (n == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_op(op, [&]<int O>() {
      unary_kernel<O, T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(x), compute_type<T>(param), n);
    });
  });
}

void launch_unary_backward(int op, int dtype, double param, void* grad_in, const void* v,
                           const void* grad, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_op(op, [&]<int O>() {
      unary_backward_kernel<O, T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
          static_cast<T*>(grad_in), static_cast<const T*>(v), static_cast<const T*>(grad),
          compute_type<T>(param), n);
    });
  });
}

}  // namespace libai::ops::cuda
