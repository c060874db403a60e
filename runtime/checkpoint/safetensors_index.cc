// Sharded safetensors checkpoints: model.safetensors.index.json maps tensor names to files.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "runtime/checkpoint/safetensors.h"

namespace libai::checkpoint {

namespace fs = std::filesystem;

struct ShardedSafetensors::State {
  std::string dir;
  std::string index_path;
  std::vector<std::string> names;
  std::unordered_map<std::string, std::string> file_of;
  Metadata metadata;
  std::mutex mutex;  // guards `shards`: loaders may open tensors from several threads
  std::unordered_map<std::string, SafetensorsFile> shards;
};

namespace {

// A shard name must stay inside the checkpoint folder.
bool is_plain_relative(const std::string& file) {
  if (file.empty()) return false;
  fs::path p(file);
  if (p.is_absolute()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

ShardedSafetensors load_index(const std::string& dir, const std::string& index_name) {
  const std::string index_path = (fs::path(dir) / index_name).string();
  std::ifstream in(index_path, std::ios::binary);
  LIBAI_CHECK_KIND(NotFound, in.good(), "safetensors index ", index_path, " does not exist");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    LIBAI_THROW(CorruptInput, "safetensors index ", index_path, " is not valid JSON: ", e.what());
  }
  LIBAI_CHECK_KIND(
      CorruptInput,
      root.is_object() && root.contains("weight_map") && root["weight_map"].is_object(),
      "safetensors index ", index_path, " has no \"weight_map\" object");

  ShardedSafetensors result;
  result.state_ = std::make_shared<ShardedSafetensors::State>();
  auto& state = *result.state_;
  state.dir = dir;
  state.index_path = index_path;
  std::vector<std::string> missing;
  for (const auto& [name, file] : root["weight_map"].items()) {
    LIBAI_CHECK_KIND(CorruptInput, file.is_string() && is_plain_relative(file.get<std::string>()),
                     "safetensors index ", index_path, ": tensor '", name, "' maps to ",
                     file.dump(), ", expected a file name inside the checkpoint folder");
    const std::string& shard = file.get_ref<const std::string&>();
    if (std::find(missing.begin(), missing.end(), shard) == missing.end() &&
        !fs::is_regular_file(fs::path(dir) / shard)) {
      missing.push_back(shard);
    }
    state.names.push_back(name);
    state.file_of[name] = shard;
  }
  if (!missing.empty()) {
    LIBAI_THROW(NotFound, "safetensors index ", index_path, " refers to missing shard file",
                missing.size() > 1 ? "s " : " ", missing);
  }
  std::sort(state.names.begin(), state.names.end());
  if (root.contains("metadata") && root["metadata"].is_object()) {
    for (const auto& [key, value] : root["metadata"].items()) {
      state.metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  return result;
}

const std::vector<std::string>& ShardedSafetensors::names() const { return state_->names; }
const Metadata& ShardedSafetensors::metadata() const { return state_->metadata; }

bool ShardedSafetensors::contains(const std::string& name) const {
  return state_->file_of.count(name) != 0;
}

const std::string& ShardedSafetensors::file_of(const std::string& name) const {
  auto it = state_->file_of.find(name);
  LIBAI_CHECK_KIND(NotFound, it != state_->file_of.end(), "safetensors index ", state_->index_path,
                   " has no tensor '", name, "'");
  return it->second;
}

const SafetensorsFile& ShardedSafetensors::shard_of(const std::string& name) const {
  const std::string& file = file_of(name);
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->shards.find(file);
  if (it == state_->shards.end()) {
    SafetensorsFile opened = SafetensorsFile::open((fs::path(state_->dir) / file).string());
    it = state_->shards.emplace(file, std::move(opened)).first;
  }
  // References into an unordered_map stay valid across later insertions.
  return it->second;
}

const SafetensorsInfo& ShardedSafetensors::info(const std::string& name) const {
  const SafetensorsFile& shard = shard_of(name);
  LIBAI_CHECK_KIND(CorruptInput, shard.contains(name), "safetensors index ", state_->index_path,
                   " places tensor '", name, "' in ", shard.path(), ", which does not hold it");
  return shard.info(name);
}

Tensor ShardedSafetensors::tensor(const std::string& name) const {
  info(name);
  return shard_of(name).tensor(name);
}

Tensor ShardedSafetensors::slice(const std::string& name, int64_t dim, int64_t start,
                                 int64_t length) const {
  info(name);
  return shard_of(name).slice(name, dim, start, length);
}

}  // namespace libai::checkpoint
