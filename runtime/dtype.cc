#include "runtime/dtype.h"

#include <ostream>

#include "runtime/error.h"

namespace libai {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::u8: return 1;
    case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "float") return DType::f32;
  if (name == "f64" || name == "float64" || name == "double") return DType::f64;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16" || name == "half" || name == "fp16") return DType::f16;
  if (name == "i64" || name == "int64" || name == "long") return DType::i64;
  if (name == "i32" || name == "int32" || name == "int") return DType::i32;
  if (name == "u8" || name == "uint8") return DType::u8;
  if (name == "bool" || name == "boolean") return DType::boolean;
  LIBAI_THROW(InvalidArgument, "unknown dtype '", name,
              "' (expected f32, f64, bf16, f16, i64, i32, u8 or bool)");
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << dtype_name(dtype); }

f16::f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) {  // NaN
    bits = uint16_t(sign | 0x7e00u);
    return;
  }
  if (mag >= 0x477ff000u) {  // overflow (rounds to >= 65520) -> inf
    bits = uint16_t(sign | 0x7c00u);
    return;
  }
  if (mag < 0x38800000u) {  // subnormal or zero in f16
    float abs_f;
    std::memcpy(&abs_f, &mag, 4);
    // Scale so the subnormal unit (2^-24) becomes 1, round to nearest even.
    float scaled = abs_f * 16777216.0f;
    uint32_t q = uint32_t(scaled);
    float rem = scaled - float(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    bits = uint16_t(sign | q);
    return;
  }
  uint32_t exp = ((mag >> 23) - 112u) << 10;
  uint32_t mant = (mag >> 13) & 0x3ffu;
  uint32_t rest = mag & 0x1fffu;
  uint32_t h = exp | mant;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  bits = uint16_t(sign | h);
}

f16::operator float() const {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    float v = float(mant) * (1.0f / 16777216.0f);
    std::memcpy(&out, &v, 4);
    out |= sign;
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace libai
