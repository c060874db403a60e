#include "runtime/checkpoint/gguf.h"

#include <cstring>
#include <fstream>
#include <unordered_map>

#include "runtime/checkpoint/mapped_file.h"
#include "runtime/error.h"

namespace libai::checkpoint {

struct GgufFile::State {
  ByteRegion region;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;
  std::vector<std::string> keys;
  std::unordered_map<std::string, GgufValue> values;
  std::vector<std::string> names;
  std::vector<GgufTensorInfo> infos;
  std::unordered_map<std::string, size_t> index;
};

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int64_t kMaxDim = int64_t(1) << 40;
constexpr int kMaxNesting = 4;           // arrays of arrays

// A cursor over the file's bytes; every read checks what is left.
struct Reader {
  const uint8_t* data;
  uint64_t size;
  uint64_t pos = 0;
  const std::string& file;

  void need(uint64_t n, const std::string& what) const {
    LIBAI_CHECK_KIND(CorruptInput, n <= size - pos, "GGUF file ", file, ": truncated reading ",
                     what, " at byte ", pos, " (", n, " bytes needed, ", size - pos, " left)");
  }
  template <typename T>
  T scalar(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data + pos, sizeof(T));  // GGUF is little-endian, as every target is
    pos += sizeof(T);
    return v;
  }
  std::string string(const std::string& what) {
    const uint64_t n = scalar<uint64_t>(what + " length");
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data + pos), size_t(n));
    pos += n;
    return s;
  }
};

bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::u16:
    case GgufValueType::i16: case GgufValueType::u32: case GgufValueType::i32:
    case GgufValueType::u64: case GgufValueType::i64: case GgufValueType::boolean:
      return true;
    default:
      return false;
  }
}

// The smallest encoding of one value of `type` (arrays and strings: their length field).
uint64_t min_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
    case GgufValueType::u16: case GgufValueType::i16: return 2;
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
    default: return 8;
  }
}

GgufValueType value_type(Reader& r, const std::string& what) {
  const uint32_t t = r.scalar<uint32_t>(what + " type");
  LIBAI_CHECK_KIND(CorruptInput, t <= uint32_t(GgufValueType::f64), "GGUF file ", r.file, ": ",
                   what, " has value type ", t, ", which is none of GGUF's (0-12)");
  return GgufValueType(t);
}

// One scalar of `type` into v.integer / v.real / v.text.
void read_scalar(Reader& r, GgufValueType type, GgufValue& v, const std::string& what) {
  switch (type) {
    case GgufValueType::u8: v.integer = r.scalar<uint8_t>(what); break;
    case GgufValueType::i8: v.integer = r.scalar<int8_t>(what); break;
    case GgufValueType::u16: v.integer = r.scalar<uint16_t>(what); break;
    case GgufValueType::i16: v.integer = r.scalar<int16_t>(what); break;
    case GgufValueType::u32: v.integer = r.scalar<uint32_t>(what); break;
    case GgufValueType::i32: v.integer = r.scalar<int32_t>(what); break;
    case GgufValueType::i64: v.integer = r.scalar<int64_t>(what); break;
    case GgufValueType::u64: {
      const uint64_t u = r.scalar<uint64_t>(what);
      v.integer_overflows = u > uint64_t(INT64_MAX);
      v.integer = v.integer_overflows ? INT64_MAX : int64_t(u);
      break;
    }
    case GgufValueType::boolean: {
      const uint8_t b = r.scalar<uint8_t>(what);
      LIBAI_CHECK_KIND(CorruptInput, b <= 1, "GGUF file ", r.file, ": ", what,
                       " is a bool of byte ", int(b), " (0 or 1 expected)");
      v.integer = b;
      break;
    }
    case GgufValueType::f32: v.real = r.scalar<float>(what); break;
    case GgufValueType::f64: v.real = r.scalar<double>(what); break;
    case GgufValueType::string: v.text = r.string(what); break;
    case GgufValueType::array: break;  // handled by read_value
  }
}

GgufValue read_value(Reader& r, GgufValueType type, const std::string& what, int depth) {
  GgufValue v;
  v.type = type;
  if (type != GgufValueType::array) {
    read_scalar(r, type, v, what);
    return v;
  }
  LIBAI_CHECK_KIND(CorruptInput, depth < kMaxNesting, "GGUF file ", r.file, ": ", what,
                   " nests arrays more than ", kMaxNesting, " deep");
  v.element = value_type(r, what + " element");
  const uint64_t n = r.scalar<uint64_t>(what + " length");
  const uint64_t each = min_bytes(v.element);
  LIBAI_CHECK_KIND(CorruptInput, n <= (r.size - r.pos) / each, "GGUF file ", r.file, ": ", what,
                   " claims ", n, " elements of ", gguf_value_type_name(v.element), " but only ",
                   r.size - r.pos, " bytes are left");
  v.length = n;
  const std::string element = what + " element";
  if (v.element == GgufValueType::string) {
    v.strings.reserve(size_t(n));
    for (uint64_t i = 0; i < n; ++i) v.strings.push_back(r.string(element));
  } else if (v.element == GgufValueType::array) {
    for (uint64_t i = 0; i < n; ++i) (void)read_value(r, GgufValueType::array, element, depth + 1);
  } else if (v.element == GgufValueType::f32 || v.element == GgufValueType::f64) {
    v.reals.reserve(size_t(n));
    GgufValue e;
    for (uint64_t i = 0; i < n; ++i) {
      read_scalar(r, v.element, e, element);
      v.reals.push_back(e.real);
    }
  } else {
    v.integers.reserve(size_t(n));
    GgufValue e;
    for (uint64_t i = 0; i < n; ++i) {
      read_scalar(r, v.element, e, element);
      v.integers.push_back(e.integer);
    }
  }
  return v;
}

GgufTensorInfo read_tensor_info(Reader& r, uint64_t i) {
  GgufTensorInfo t;
  t.name = r.string("tensor " + std::to_string(i) + " name");
  const std::string what = "tensor '" + t.name + "'";
  const uint32_t dims = r.scalar<uint32_t>(what + " dimension count");
  LIBAI_CHECK_KIND(CorruptInput, dims >= 1 && dims <= kMaxDims, "GGUF file ", r.file, ": ", what,
                   " has ", dims, " dimensions (1 to ", kMaxDims, " expected)");
  std::vector<int64_t> ne(dims);
  for (uint32_t d = 0; d < dims; ++d) {
    const uint64_t n = r.scalar<uint64_t>(what + " dimension");
    LIBAI_CHECK_KIND(CorruptInput, n <= uint64_t(kMaxDim), "GGUF file ", r.file, ": ", what,
                     " has dimension ", d, " of ", n, " (at most 2^40)");
    ne[d] = int64_t(n);
  }
  const uint32_t type = r.scalar<uint32_t>(what + " type");
  int64_t block_values = 0, block_bytes = 0;
  LIBAI_CHECK_KIND(CorruptInput, ggml_block_layout(type, block_values, block_bytes), "GGUF file ",
                   r.file, ": ", what, " has tensor type ", type, ", which this reader does not know");
  t.type = GgmlType(type);
  LIBAI_CHECK_KIND(CorruptInput, ne[0] % block_values == 0, "GGUF file ", r.file, ": ", what,
                   " of type ", ggml_type_name(t.type), " has rows of ", ne[0],
                   " values, not a multiple of its block of ", block_values);
  uint64_t bytes = uint64_t(ne[0] / block_values) * uint64_t(block_bytes);
  for (uint32_t d = 1; d < dims; ++d)
    LIBAI_CHECK_KIND(CorruptInput, checked_mul(bytes, uint64_t(ne[d]), bytes), "GGUF file ",
                     r.file, ": ", what, " is too large (its size overflows 64 bits)");
  t.bytes = bytes;
  t.offset = r.scalar<uint64_t>(what + " offset");
  for (int d = int(dims) - 1; d >= 0; --d) t.shape.push_back(ne[size_t(d)]);
  return t;
}

std::shared_ptr<GgufFile::State> parse(ByteRegion region) {
  auto s = std::make_shared<GgufFile::State>();
  s->region = std::move(region);
  const std::string& file = s->region.name;
  Reader r{s->region.data, s->region.size, 0, file};
  const uint32_t magic = r.scalar<uint32_t>("the magic number");
  LIBAI_CHECK_KIND(CorruptInput, magic == kMagic, "GGUF file ", file,
                   ": bad magic (the file does not start with \"GGUF\")");
  s->version = r.scalar<uint32_t>("the version");
  LIBAI_CHECK_KIND(CorruptInput, s->version == 2 || s->version == 3, "GGUF file ", file,
                   ": version ", s->version, " (this reader reads versions 2 and 3)");
  const uint64_t tensors = r.scalar<uint64_t>("the tensor count");
  const uint64_t kvs = r.scalar<uint64_t>("the metadata count");
  // Each key-value pair takes at least 13 bytes and each tensor description 24.
  LIBAI_CHECK_KIND(CorruptInput, kvs <= (r.size - r.pos) / 13, "GGUF file ", file, ": claims ",
                   kvs, " metadata entries in ", r.size - r.pos, " bytes");
  for (uint64_t i = 0; i < kvs; ++i) {
    std::string key = r.string("metadata key " + std::to_string(i));
    const std::string what = "metadata '" + key + "'";
    const GgufValueType type = value_type(r, what);
    GgufValue value = read_value(r, type, what, 0);
    LIBAI_CHECK_KIND(CorruptInput, !s->values.count(key), "GGUF file ", file,
                     ": metadata key '", key, "' appears twice");
    s->values.emplace(key, std::move(value));
    s->keys.push_back(std::move(key));
  }
  if (auto it = s->values.find("general.alignment"); it != s->values.end()) {
    const GgufValue& a = it->second;
    LIBAI_CHECK_KIND(CorruptInput,
                     is_integer_type(a.type) && a.type != GgufValueType::boolean &&
                         a.integer > 0 && a.integer <= (1 << 16) &&
                         (a.integer & (a.integer - 1)) == 0,
                     "GGUF file ", file, ": general.alignment should be a power of two up to "
                     "65536, got ", a.integer);
    s->alignment = uint64_t(a.integer);
  }
  LIBAI_CHECK_KIND(CorruptInput, tensors <= (r.size - r.pos) / 24, "GGUF file ", file,
                   ": claims ", tensors, " tensors in ", r.size - r.pos, " bytes");
  for (uint64_t i = 0; i < tensors; ++i) {
    GgufTensorInfo t = read_tensor_info(r, i);
    LIBAI_CHECK_KIND(CorruptInput, !s->index.count(t.name), "GGUF file ", file, ": tensor '",
                     t.name, "' appears twice");
    s->index.emplace(t.name, s->infos.size());
    s->names.push_back(t.name);
    s->infos.push_back(std::move(t));
  }
  s->data_start = (r.pos + s->alignment - 1) / s->alignment * s->alignment;
  const uint64_t data_size = s->data_start <= r.size ? r.size - s->data_start : 0;
  for (auto& t : s->infos) {
    LIBAI_CHECK_KIND(CorruptInput, t.offset % s->alignment == 0, "GGUF file ", file,
                     ": tensor '", t.name, "' has offset ", t.offset, ", not a multiple of the "
                     "alignment ", s->alignment);
    LIBAI_CHECK_KIND(CorruptInput, t.offset <= data_size && t.bytes <= data_size - t.offset,
                     "GGUF file ", file, ": tensor '", t.name, "' spans bytes ", t.offset, " + ",
                     t.bytes, " of a data section of ", data_size, " bytes (truncated file or "
                     "offset out of range)");
    t.offset += s->data_start;
  }
  return s;
}

std::string type_mismatch(const GgufValue& v) {
  return v.type == GgufValueType::array
             ? std::string("an array of ") + gguf_value_type_name(v.element)
             : std::string("of type ") + gguf_value_type_name(v.type);
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static const char* const kNames[] = {"u8",   "i8",  "u16",    "i16",   "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(type) <= 12 ? kNames[uint32_t(type)] : "unknown";
}

GgufFile GgufFile::open(const std::string& path) { return GgufFile(parse(map_file(path))); }

GgufFile GgufFile::open_bytes(const void* data, size_t size, std::string name) {
  return GgufFile(parse(copy_bytes(data, size, std::move(name))));
}

uint32_t GgufFile::version() const { return state_->version; }
const std::string& GgufFile::path() const { return state_->region.name; }
uint64_t GgufFile::alignment() const { return state_->alignment; }
const std::vector<std::string>& GgufFile::keys() const { return state_->keys; }

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = state_->values.find(key);
  return it == state_->values.end() ? nullptr : &it->second;
}

namespace {

const GgufValue& require(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  LIBAI_CHECK_KIND(CorruptInput, v, "GGUF file ", f.path(), ": metadata key '", key,
                   "' is missing");
  return *v;
}

int64_t as_int(const GgufFile& f, const std::string& key, const GgufValue& v) {
  LIBAI_CHECK_KIND(CorruptInput, is_integer_type(v.type) && v.type != GgufValueType::boolean,
                   "GGUF file ", f.path(), ": metadata '", key, "' is ", type_mismatch(v),
                   ", expected an integer");
  LIBAI_CHECK_KIND(CorruptInput, !v.integer_overflows, "GGUF file ", f.path(), ": metadata '",
                   key, "' is larger than 2^63 - 1");
  return v.integer;
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = require(*this, key);
  LIBAI_CHECK_KIND(CorruptInput, v.type == GgufValueType::string, "GGUF file ", path(),
                   ": metadata '", key, "' is ", type_mismatch(v), ", expected a string");
  return v.text;
}

std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return find(key) ? get_string(key) : fallback;
}

int64_t GgufFile::get_int(const std::string& key) const {
  return as_int(*this, key, require(*this, key));
}

int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  return find(key) ? get_int(key) : fallback;
}

double GgufFile::get_real(const std::string& key, double fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  if (v->type == GgufValueType::f32 || v->type == GgufValueType::f64) return v->real;
  return double(as_int(*this, key, *v));
}

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  LIBAI_CHECK_KIND(CorruptInput, v->type == GgufValueType::boolean, "GGUF file ", path(),
                   ": metadata '", key, "' is ", type_mismatch(*v), ", expected a bool");
  return v->integer != 0;
}

const std::vector<std::string>& GgufFile::get_strings(const std::string& key) const {
  const GgufValue& v = require(*this, key);
  LIBAI_CHECK_KIND(CorruptInput,
                   v.type == GgufValueType::array && v.element == GgufValueType::string,
                   "GGUF file ", path(), ": metadata '", key, "' is ", type_mismatch(v),
                   ", expected an array of strings");
  return v.strings;
}

const std::vector<int64_t>& GgufFile::get_ints(const std::string& key) const {
  const GgufValue& v = require(*this, key);
  LIBAI_CHECK_KIND(CorruptInput, v.type == GgufValueType::array && is_integer_type(v.element),
                   "GGUF file ", path(), ": metadata '", key, "' is ", type_mismatch(v),
                   ", expected an array of integers");
  return v.integers;
}

std::vector<double> GgufFile::get_reals(const std::string& key) const {
  const GgufValue& v = require(*this, key);
  if (v.type == GgufValueType::array &&
      (v.element == GgufValueType::f32 || v.element == GgufValueType::f64))
    return v.reals;
  const auto& ints = get_ints(key);
  return std::vector<double>(ints.begin(), ints.end());
}

const std::vector<std::string>& GgufFile::names() const { return state_->names; }

bool GgufFile::contains(const std::string& name) const { return state_->index.count(name) > 0; }

const GgufTensorInfo& GgufFile::info(const std::string& name) const {
  auto it = state_->index.find(name);
  LIBAI_CHECK_KIND(NotFound, it != state_->index.end(), "GGUF file ", path(), " has no tensor '",
                   name, "'");
  return state_->infos[it->second];
}

std::span<const uint8_t> GgufFile::raw(const std::string& name) const {
  const GgufTensorInfo& t = info(name);
  return {state_->region.data + t.offset, size_t(t.bytes)};
}

Tensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo& t = info(name);
  DType view = DType::f32;
  switch (t.type) {
    case GgmlType::f32: view = DType::f32; break;
    case GgmlType::f16: view = DType::f16; break;
    case GgmlType::bf16: view = DType::bf16; break;
    case GgmlType::i32: view = DType::i32; break;
    case GgmlType::i64: view = DType::i64; break;
    case GgmlType::f64: view = DType::f64; break;
    default: return tensor_f32(name);
  }
  return view_bytes(state_->region, size_t(t.offset), t.shape, view);
}

Tensor GgufFile::tensor_f32(const std::string& name) const {
  const GgufTensorInfo& t = info(name);
  LIBAI_CHECK_KIND(Unsupported, ggml_dequantizable(t.type), "GGUF file ", path(), ": tensor '",
                   name, "' is of type ", ggml_type_name(t.type), ", which this reader does not "
                   "dequantise (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)");
  Tensor out = Tensor::empty(t.shape, DType::f32);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  dequantize_row(t.type, state_->region.data + t.offset, out.data<float>(), n);
  drop_pages(state_->region, size_t(t.offset), size_t(t.bytes));  // read once: not kept resident
  return out;
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace libai::checkpoint
