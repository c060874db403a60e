#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "runtime/checkpoint/mapped_file.h"
#include "runtime/checkpoint/safetensors_format.h"

namespace libai::checkpoint {

struct SafetensorsFile::State {
  ByteRegion region;
  uint64_t data_start = 0;  // 8 + header length
  std::vector<SafetensorsInfo> infos;
  std::vector<std::string> names;
  std::unordered_map<std::string, size_t> index;
  Metadata metadata;
};

namespace {

// The reference implementation refuses headers above 100 MB; so do we (a guard against a
// length field that asks us to parse the whole of a huge file as JSON).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

SafetensorsInfo parse_entry(const std::string& file, const std::string& name,
                            const nlohmann::json& entry) {
  LIBAI_CHECK_KIND(CorruptInput, entry.is_object(), "safetensors file ", file, ": tensor '", name,
                   "' is described by ", entry.type_name(), ", expected an object");
  SafetensorsInfo info;
  info.name = name;
  auto dtype_it = entry.find("dtype");
  LIBAI_CHECK_KIND(CorruptInput, dtype_it != entry.end() && dtype_it->is_string(),
                   "safetensors file ", file, ": tensor '", name, "' has no dtype string");
  const std::string& dtype_text = dtype_it->get_ref<const std::string&>();
  auto dtype = safetensors_dtype(dtype_text);
  LIBAI_CHECK_KIND(Unsupported, dtype.has_value(), "safetensors file ", file, ": tensor '", name,
                   "' has dtype '", dtype_text, "'; supported: ", kSafetensorsDtypeList);
  info.dtype = *dtype;

  auto shape_it = entry.find("shape");
  LIBAI_CHECK_KIND(CorruptInput, shape_it != entry.end() && shape_it->is_array(),
                   "safetensors file ", file, ": tensor '", name, "' has no shape array");
  for (const auto& dim : *shape_it) {
    LIBAI_CHECK_KIND(CorruptInput, dim.is_number_unsigned() && dim.get<uint64_t>() <= INT64_MAX,
                     "safetensors file ", file, ": tensor '", name, "' has shape entry ",
                     dim.dump(), ", expected a non-negative integer");
    info.shape.push_back(int64_t(dim.get<uint64_t>()));
  }

  auto offsets_it = entry.find("data_offsets");
  LIBAI_CHECK_KIND(CorruptInput,
                   offsets_it != entry.end() && offsets_it->is_array() && offsets_it->size() == 2 &&
                       (*offsets_it)[0].is_number_unsigned() &&
                       (*offsets_it)[1].is_number_unsigned(),
                   "safetensors file ", file, ": tensor '", name,
                   "' needs data_offsets [begin, end] of non-negative integers");
  info.begin = (*offsets_it)[0].get<uint64_t>();
  info.end = (*offsets_it)[1].get<uint64_t>();
  LIBAI_CHECK_KIND(CorruptInput, info.begin <= info.end, "safetensors file ", file, ": tensor '",
                   name, "' has data_offsets [", info.begin, ", ", info.end,
                   "] that run backwards");

  uint64_t numel = 0, bytes = 0;
  LIBAI_CHECK_KIND(
      CorruptInput,
      checked_numel(info.shape, numel) && checked_mul(numel, dtype_size(info.dtype), bytes),
      "safetensors file ", file, ": tensor '", name, "' has shape ", shape_str(info.shape),
      " whose size overflows");
  LIBAI_CHECK_KIND(CorruptInput, bytes == info.end - info.begin, "safetensors file ", file,
                   ": tensor '", name, "' of shape ", shape_str(info.shape), " and dtype ",
                   dtype_text, " needs ", bytes, " bytes but data_offsets [", info.begin, ", ",
                   info.end, "] span ", info.end - info.begin);
  return info;
}

Metadata parse_metadata(const std::string& file, const nlohmann::json& value) {
  LIBAI_CHECK_KIND(CorruptInput, value.is_object(), "safetensors file ", file, ": __metadata__ is ",
                   value.type_name(), ", expected an object of strings");
  Metadata metadata;
  for (const auto& [key, item] : value.items()) {
    LIBAI_CHECK_KIND(CorruptInput, item.is_string(), "safetensors file ", file,
                     ": __metadata__ key '", key, "' holds ", item.type_name(),
                     ", expected a string");
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

void parse(ByteRegion region, SafetensorsFile::State& state) {
  const std::string& file = region.name;
  LIBAI_CHECK_KIND(CorruptInput, region.size >= 8, "safetensors file ", file, " is ", region.size,
                   " bytes, too short for the 8-byte header length");
  const uint64_t header_len = read_u64_le(region.data);
  LIBAI_CHECK_KIND(CorruptInput, header_len <= region.size - 8, "safetensors file ", file,
                   ": header length ", header_len, " exceeds the ", region.size - 8,
                   " bytes after the length field (truncated file?)");
  LIBAI_CHECK_KIND(CorruptInput, header_len <= kMaxHeaderBytes, "safetensors file ", file,
                   ": header length ", header_len, " exceeds the limit of ", kMaxHeaderBytes);
  const char* header = reinterpret_cast<const char*>(region.data + 8);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header, header + header_len);
  } catch (const nlohmann::json::exception& e) {
    LIBAI_THROW(CorruptInput, "safetensors file ", file, ": header is not valid JSON: ", e.what());
  }
  LIBAI_CHECK_KIND(CorruptInput, root.is_object(), "safetensors file ", file, ": header is ",
                   root.type_name(), ", expected a JSON object");

  state.data_start = 8 + header_len;
  const uint64_t data_size = region.size - state.data_start;
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      state.metadata = parse_metadata(file, entry);
      continue;
    }
    state.infos.push_back(parse_entry(file, name, entry));
  }
  std::sort(state.infos.begin(), state.infos.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Sorted spans must tile the data section exactly: a gap or an overlap means the offsets lie.
  uint64_t expected_begin = 0;
  const SafetensorsInfo* previous = nullptr;
  for (const auto& info : state.infos) {
    LIBAI_CHECK_KIND(CorruptInput, info.begin >= expected_begin, "safetensors file ", file,
                     ": tensor '", info.name, "' at bytes [", info.begin, ", ", info.end,
                     ") overlaps tensor '", previous ? previous->name : "", "' ending at ",
                     expected_begin);
    LIBAI_CHECK_KIND(CorruptInput, info.begin == expected_begin, "safetensors file ", file,
                     ": tensor '", info.name, "' starts at byte ", info.begin,
                     " leaving a hole after byte ", expected_begin, " of the data section");
    LIBAI_CHECK_KIND(CorruptInput, info.end <= data_size, "safetensors file ", file, ": tensor '",
                     info.name, "' ends at byte ", info.end, " but the data section has only ",
                     data_size, " bytes (truncated file?)");
    expected_begin = info.end;
    previous = &info;
  }
  LIBAI_CHECK_KIND(CorruptInput, expected_begin == data_size, "safetensors file ", file,
                   ": the tensors cover ", expected_begin, " bytes but the data section has ",
                   data_size);
  for (size_t i = 0; i < state.infos.size(); ++i) {
    state.names.push_back(state.infos[i].name);
    state.index.emplace(state.infos[i].name, i);
  }
  state.region = std::move(region);
}

std::shared_ptr<const SafetensorsFile::State> make_state(ByteRegion region) {
  auto state = std::make_shared<SafetensorsFile::State>();
  parse(std::move(region), *state);
  return state;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  return SafetensorsFile(make_state(map_file(path)));
}

SafetensorsFile SafetensorsFile::open_bytes(const void* data, size_t size, std::string name) {
  return SafetensorsFile(make_state(copy_bytes(data, size, std::move(name))));
}

const SafetensorsFile::State& SafetensorsFile::state() const {
  LIBAI_CHECK(state_ != nullptr, "use of a default-constructed SafetensorsFile");
  return *state_;
}

const std::vector<std::string>& SafetensorsFile::names() const { return state().names; }
const Metadata& SafetensorsFile::metadata() const { return state().metadata; }
const std::string& SafetensorsFile::path() const { return state().region.name; }

bool SafetensorsFile::contains(const std::string& name) const {
  return state().index.count(name) != 0;
}

const SafetensorsInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = state().index.find(name);
  LIBAI_CHECK_KIND(NotFound, it != state().index.end(), "safetensors file ", path(),
                   " has no tensor '", name, "'");
  return state().infos[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsInfo& meta = info(name);
  return view_bytes(state().region, size_t(state().data_start + meta.begin), meta.shape,
                    meta.dtype);
}

Tensor SafetensorsFile::slice(const std::string& name, int64_t dim, int64_t start,
                              int64_t length) const {
  const SafetensorsInfo& meta = info(name);
  const int rank = int(meta.shape.size());
  LIBAI_CHECK(rank > 0, "slice of '", name, "' in ", path(), ": the tensor is a scalar");
  const int d = normalize_dim(dim, rank, "slice dim");
  LIBAI_CHECK(start >= 0 && length >= 0 && start <= meta.shape[d] - length, "slice of '", name,
              "' in ", path(), ": range [", start, ", ", start + length, ") along dim ", d,
              " is outside shape ", shape_str(meta.shape));
  Shape out_shape = meta.shape;
  out_shape[d] = length;
  const size_t es = dtype_size(meta.dtype);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= meta.shape[i];
  for (int i = d + 1; i < rank; ++i) inner *= meta.shape[i];
  const size_t base = size_t(state().data_start + meta.begin);
  if (d == 0 || outer == 1) {
    return view_bytes(state().region, base + size_t(start * inner) * es, out_shape, meta.dtype);
  }
  // [outer, shape[d], inner] -> [outer, length, inner]: one contiguous run per outer index.
  Tensor out = Tensor::empty(out_shape, meta.dtype);
  const size_t run = size_t(length * inner) * es, src_pitch = size_t(meta.shape[d] * inner) * es;
  const uint8_t* src = state().region.data + base + size_t(start * inner) * es;
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t o = 0; o < outer; ++o) {
    if (meta.dtype == DType::boolean) check_bool_bytes(src + o * src_pitch, run, path());
    std::memcpy(dst + o * run, src + o * src_pitch, run);
  }
  return out;
}

}  // namespace libai::checkpoint
