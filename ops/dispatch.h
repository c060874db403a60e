// Dispatch: the one place where ops choose a kernel by device and an element type by dtype.
//
// Each op declares a kernel slot with its signature, backends register into it, and the
// op's front end calls it for the device of its inputs:
//
//   // ops/softmax.h (internal part)
//   LIBAI_KERNEL_SLOT(softmax_forward, void(const Tensor& x, Tensor& out, int64_t rows, int64_t
//   cols));
//   // ops/cpu/softmax.cc
//   LIBAI_REGISTER_KERNEL(softmax_forward, DeviceType::cpu, softmax_forward_cpu);
//   // ops/softmax.cc
//   kernel<softmax_forward_slot>(x.device())(x, out, rows, cols);
//
// Inside a kernel, dispatch_floating(dtype, "softmax", [&]<typename T>() { ... }) runs the
// body for T = float, double, bf16 or f16 (and reports any other dtype as Unsupported).
#pragma once

#include <cstdint>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace libai::ops {

template <typename Signature>
struct KernelSlot {
  const char* name;
  Signature* functions[kNumDeviceTypes] = {};
};

#define LIBAI_KERNEL_SLOT(slot_name, signature)                    \
  struct slot_name##_slot {                                        \
    using Signature = signature;                                   \
    static ::libai::ops::KernelSlot<signature>& table() {          \
      static ::libai::ops::KernelSlot<signature> slot{#slot_name}; \
      return slot;                                                 \
    }                                                              \
  }

#define LIBAI_REGISTER_KERNEL(slot_name, device_type, function)                       \
  static const bool libai_registered_##slot_name##_##function [[maybe_unused]] = [] { \
    slot_name##_slot::table().functions[int(device_type)] = &function;                \
    return true;                                                                      \
  }()

template <typename Slot>
typename Slot::Signature* kernel(Device device) {
  auto* fn = Slot::table().functions[int(device.type)];
  LIBAI_CHECK_KIND(Unsupported, fn != nullptr, "kernel '", Slot::table().name, "' has no ",
                   device.is_cuda() ? "CUDA" : "CPU", " implementation in this build (device ",
                   device, ")");
  return fn;
}

template <typename Body>
decltype(auto) dispatch_floating(DType dtype, const char* op, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    case DType::bf16: return body.template operator()<bf16>();
    case DType::f16: return body.template operator()<f16>();
    default: break;
  }
  LIBAI_THROW(Unsupported, op, ": dtype ", dtype, " is not supported (expected a floating dtype)");
}

template <typename Body>
decltype(auto) dispatch_all(DType dtype, const char* op, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    case DType::bf16: return body.template operator()<bf16>();
    case DType::f16: return body.template operator()<f16>();
    case DType::i64: return body.template operator()<int64_t>();
    case DType::i32: return body.template operator()<int32_t>();
    case DType::u8: return body.template operator()<uint8_t>();
    case DType::boolean: return body.template operator()<bool>();
  }
  LIBAI_THROW(Unsupported, op, ": dtype ", dtype, " is not supported");
}

// The arithmetic type a kernel computes in for storage type T: f64 stays f64, the 16-bit
// formats and f32 compute in f32.
template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// Storage value -> compute value, and back (16-bit formats round to nearest even).
template <typename T>
inline compute_t<T> load(T v) {
  if constexpr (is_half_v<T>)
    return float(v);
  else
    return static_cast<compute_t<T>>(v);
}
template <typename T>
inline T store(compute_t<T> v) {
  if constexpr (is_half_v<T>)
    return T(float(v));
  else
    return static_cast<T>(v);
}

// Checks shared by the op front ends.
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);

}  // namespace libai::ops
