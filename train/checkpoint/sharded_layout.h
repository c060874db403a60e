// Internal to the sharded checkpoint format (sharded.cc): layout.json, the index of every
// parameter's pieces over the ranks' shard files, built from the shards a save wrote and read
// back, validated against the files, by a loader; a shard file's serialisation; a whole tensor
// assembled from its pieces. Note [Sharded checkpoints] in sharded.h has the format.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/tensor.h"
#include "train/checkpoint/sharded.h"

namespace libai::train::sharded_layout {

using Json = nlohmann::json;

struct Piece {
  std::string file, key;
  int split_dim = -1, tp_rank = 0, tp_size = 1;
  Shape local_shape;
  int64_t begin = 0, end = 0;
  std::vector<std::vector<models::TpRows>> rows;  // partly replicated: every block's rows
};

// A parameter or one of its optimizer-state tensors.
struct Entry {
  Shape shape;
  DType dtype = DType::f32;
  std::vector<Piece> pieces;
};

struct ParamEntry {
  Entry values;
  std::map<std::string, Entry> state;
};

struct ParsedLayout {
  ShardedLayout layout;
  std::map<std::string, checkpoint::SafetensorsFile> files;
  std::map<std::string, ParamEntry> parameters;
};

// "shards/rank_00003.safetensors".
std::string shard_file(int rank);
// The safetensors bytes of one rank's shard: its slices and their optimizer state, with the
// pieces in the metadata.
std::string serialize_shard(const std::vector<OwnedSlice>& slices);
// layout.json from the shards in `temp` that `writers` (world ranks) wrote.
Json build_layout(const std::filesystem::path& temp, const std::vector<int>& writers,
                  const ShardedLayout& layout, int world_size);
// Reads and validates folder/layout.json and every file it names.
ParsedLayout parse_layout(const std::filesystem::path& folder);
// The whole tensor of an entry, assembled from its pieces (validated at open).
Tensor assemble(const Entry& e, const std::map<std::string, checkpoint::SafetensorsFile>& files);

}  // namespace libai::train::sharded_layout
