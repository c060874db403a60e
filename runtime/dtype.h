// Element types of tensors and the 16-bit float formats.
//
//   DType t = DType::bf16;
//   dtype_size(t);            // 2
//   dtype_name(t);            // "bf16"
//   bf16 h = bf16(1.5f);      // round-to-nearest-even
//   float f = float(h);
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace libai {

enum class DType : uint8_t { f32, f64, bf16, f16, i64, i32, u8, boolean };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
DType parse_dtype(std::string_view name);  // "f32", "float32", "bf16", ...; throws InvalidArgument
inline bool is_floating(DType d) {
  return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16;
}
std::ostream& operator<<(std::ostream& os, DType dtype);

// bfloat16: the upper 16 bits of an IEEE f32, rounded to nearest even.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays NaN
      bits = uint16_t((u >> 16) | 0x40);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = uint16_t(u >> 16);
  }
  explicit operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// IEEE half precision, converted in software (F16C is used by kernels where it matters).
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f);
  explicit operator float() const;
};

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::boolean;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// Conversion of any element type to and from the f32/f64 compute types.
template <typename T>
inline float to_float(T v) {
  return static_cast<float>(v);
}
template <typename T>
inline T from_float(float v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    return T(v);
  else
    return static_cast<T>(v);
}

}  // namespace libai
