// safetensors checkpoints: zero-copy reads by mmap, per-rank slice reads, atomic writes, and
// sharded checkpoints (model.safetensors.index.json).
//
//   auto file = checkpoint::SafetensorsFile::open("model.safetensors");
//   for (const auto& name : file.names()) {
//     const auto& info = file.info(name);        // dtype, shape, byte range
//     Tensor w = file.tensor(name);              // a view of the mapping, no copy
//   }
//   Tensor shard = file.slice("mlp.weight", 1, rank * cols, cols);  // only those bytes
//   checkpoint::save_safetensors("out.safetensors", {{"w", w}}, {{"format", "pt"}});
//   auto sharded = checkpoint::load_index("model_dir");  // opens the shards lazily
//
// Every header field is validated before any tensor is made: header length against the file
// size, JSON, dtype strings, shape x dtype size against the byte span, spans inside the data
// section, sorted spans contiguous and non-overlapping from 0 to the end of the file (as the
// reference implementation requires). A lying or truncated file raises CorruptInput naming the
// file, the tensor and the numbers; an unknown dtype raises Unsupported.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace libai::checkpoint {

struct SafetensorsInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte range [begin, end) relative to the start of the data section
  uint64_t end = 0;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  // Parses a copy of an in-memory file (fuzzing, network buffers); `name` is used in errors.
  static SafetensorsFile open_bytes(const void* data, size_t size, std::string name = "<memory>");

  // In the order of their data in the file.
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  const SafetensorsInfo& info(const std::string& name) const;  // NotFound
  // A zero-copy view (copied only when the file misaligns it for its dtype).
  Tensor tensor(const std::string& name) const;
  // Elements [start, start + length) along `dim`. Dim 0 is a zero-copy view; other dims copy
  // the strided rows into a new contiguous tensor, touching only the slice's bytes.
  Tensor slice(const std::string& name, int64_t dim, int64_t start, int64_t length) const;
  const Metadata& metadata() const;  // the header's __metadata__ (empty when absent)
  const std::string& path() const;

  struct State;  // internal

 private:
  explicit SafetensorsFile(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  const State& state() const;
  std::shared_ptr<const State> state_;
};

// The file's bytes: the header padded to 8 bytes, then contiguous little-endian data ordered by
// element size, widest first (stable), so that every tensor is aligned for its dtype. Tensors on
// other devices or with strides are copied first.
std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata = {});
// Writes serialize_safetensors() to a temporary file in the same folder, flushes it and renames
// it over `path`, so a crash never leaves a half-written checkpoint.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata = {});

// A checkpoint split over several files by model.safetensors.index.json ({"weight_map":
// {tensor name: file name}}). Shards open on first use; copies share the opened shards.
class ShardedSafetensors {
 public:
  const std::vector<std::string>& names() const;  // sorted
  bool contains(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;  // the shard's file name
  const SafetensorsFile& shard_of(const std::string& name) const;
  const SafetensorsInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;
  Tensor slice(const std::string& name, int64_t dim, int64_t start, int64_t length) const;
  // The index's "metadata" object; non-string values as their JSON text.
  const Metadata& metadata() const;

 private:
  friend ShardedSafetensors load_index(const std::string& dir, const std::string& index_name);
  ShardedSafetensors() = default;
  struct State;
  std::shared_ptr<State> state_;
};

// Reads `dir/index_name`; every shard it names must exist (NotFound lists the missing ones).
ShardedSafetensors load_index(const std::string& dir,
                              const std::string& index_name = "model.safetensors.index.json");

}  // namespace libai::checkpoint
