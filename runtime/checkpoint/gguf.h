// GGUF files (the format of llama.cpp and ggml): the header, the metadata and the tensor table,
// every field validated against the file's bytes before anything is used; tensors come back as
// zero-copy views (F32, F16, BF16) or dequantised into f32 (the block types).
//
//   auto file = checkpoint::GgufFile::open("model-q4_0.gguf");   // NotFound / CorruptInput
//   std::string arch = file.get_string("general.architecture");   // "llama"
//   int64_t layers = file.get_int("llama.block_count");
//   const auto& tokens = file.get_strings("tokenizer.ggml.tokens");
//   const GgufTensorInfo& t = file.info("blk.0.attn_q.weight");  // row-major shape, ggml type
//   Tensor w = file.tensor("blk.0.attn_q.weight");               // f32 from Q4_0 blocks
//
// Errors name the file and the field: a bad magic or version, a count or a string longer than
// what is left of the file, an unknown value or tensor type, more than 4 dimensions or a
// dimension above 2^40, a row that is not a whole number of blocks, an offset that is not
// aligned or data past the end of the file, a duplicate key or tensor name (CorruptInput;
// Unsupported for a known type this reader does not dequantise).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace libai::checkpoint {

// The tensor types of ggml (the numbers are the file's).
enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
  i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, bf16 = 30,
};
const char* ggml_type_name(GgmlType type);  // "Q4_0", "F16", ...
// Values per block and bytes per block (1 and the element size for the plain types); false for
// a number that is no type this reader knows.
bool ggml_block_layout(uint32_t type, int64_t& block_values, int64_t& block_bytes);
// Whether dequantize_row handles the type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
// Q5_K and Q6_K.
bool ggml_dequantizable(GgmlType type);
// n values (a multiple of the type's block) from their blocks at `blocks`.
void dequantize_row(GgmlType type, const uint8_t* blocks, float* out, int64_t n);

// The metadata value types (the file's numbers).
enum class GgufValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8,
  array = 9, u64 = 10, i64 = 11, f64 = 12,
};

struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  GgufValueType element = GgufValueType::u8;  // arrays: the elements' type
  // Scalars: integers and booleans in `integer` (u64 values above 2^63 - 1 are rejected where
  // an integer is asked for), f32/f64 in `real`, strings in `text`.
  int64_t integer = 0;
  bool integer_overflows = false;  // a u64 above INT64_MAX
  double real = 0;
  std::string text;
  // Arrays: strings, integers (and booleans) or reals by element type; nested arrays are
  // parsed and kept only as their length.
  std::vector<std::string> strings;
  std::vector<int64_t> integers;
  std::vector<double> reals;
  uint64_t length = 0;  // arrays: the element count
};
const char* gguf_value_type_name(GgufValueType type);

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::f32;
  Shape shape;          // row-major: the file's dimensions reversed (ne[0] is the last)
  uint64_t offset = 0;  // from the start of the file
  uint64_t bytes = 0;
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path);
  // Parses a copy of an in-memory file (fuzzing, tests); `name` is used in errors.
  static GgufFile open_bytes(const void* data, size_t size, std::string name = "<memory>");

  uint32_t version() const;
  const std::string& path() const;
  uint64_t alignment() const;

  // Metadata keys in file order; find returns nullptr when absent.
  const std::vector<std::string>& keys() const;
  const GgufValue* find(const std::string& key) const;
  // CorruptInput naming the file and the key when absent or of another type. Integers accept
  // any integer type; reals accept f32, f64 and integers.
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_real(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  const std::vector<std::string>& get_strings(const std::string& key) const;
  const std::vector<int64_t>& get_ints(const std::string& key) const;  // integer arrays
  std::vector<double> get_reals(const std::string& key) const;         // real or integer arrays

  // Tensors in file order.
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  const GgufTensorInfo& info(const std::string& name) const;  // NotFound naming the file
  // F32, F16, BF16, I32, I64, F64: a view of the file's bytes; the block types: dequantised
  // into a new f32 tensor (Unsupported naming the type for Q2_K, Q3_K, Q8_1, Q8_K, I8, I16).
  Tensor tensor(const std::string& name) const;
  // Always f32: dequantised or converted.
  Tensor tensor_f32(const std::string& name) const;
  // The stored bytes (blocks as in the file).
  std::span<const uint8_t> raw(const std::string& name) const;

  struct State;  // internal

 private:
  explicit GgufFile(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

// Whether `path` is a GGUF file: a regular file whose first four bytes are "GGUF".
bool is_gguf_file(const std::string& path);

}  // namespace libai::checkpoint
