// Internal: the safetensors dtype strings, shared by the reader and the writer.
#pragma once

#include <optional>
#include <string_view>

#include "runtime/dtype.h"

namespace libai::checkpoint {

inline constexpr const char* kSafetensorsDtypeList = "F32, F64, BF16, F16, I64, I32, U8, BOOL";

inline std::optional<DType> safetensors_dtype(std::string_view text) {
  if (text == "F32") return DType::f32;
  if (text == "F64") return DType::f64;
  if (text == "BF16") return DType::bf16;
  if (text == "F16") return DType::f16;
  if (text == "I64") return DType::i64;
  if (text == "I32") return DType::i32;
  if (text == "U8") return DType::u8;
  if (text == "BOOL") return DType::boolean;
  return std::nullopt;
}

inline const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

}  // namespace libai::checkpoint
