#include "runtime/checkpoint/torch_zip.h"

#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "runtime/checkpoint/mapped_file.h"
#include "runtime/checkpoint/pickle.h"
#include "runtime/checkpoint/torch_pickle.h"
#include "runtime/checkpoint/zip_reader.h"

namespace libai::checkpoint {

using pickle::Value;
using Kind = Value::Kind;

struct TorchCheckpoint::State {
  ByteRegion region;
  std::unique_ptr<ZipReader> zip;
  std::string data_folder;  // "<prefix>/data/"
  std::vector<std::string> names;
  std::unordered_map<std::string, TorchTensorInfo> infos;
  std::vector<std::pair<std::string, std::string>> other_values;
  std::mutex mutex;  // guards `storages`
  // One 1-d tensor per storage, so that views of one storage share it (tied weights).
  std::unordered_map<std::string, Tensor> storages;
};

namespace {

// Nested containers deeper than this are not a state dict.
constexpr int kMaxDepth = 64;

std::string leaf_text(const Value& v) {
  switch (v.kind) {
    case Kind::none: return "None";
    case Kind::boolean: return v.boolean ? "True" : "False";
    case Kind::integer: return std::to_string(v.integer);
    case Kind::floating: {
      std::ostringstream os;
      os.precision(17);
      os << v.floating;
      return os.str();
    }
    default: return v.text;
  }
}

struct Flattener {
  TorchCheckpoint::State& state;
  std::unordered_set<const Value*> visited;  // each container once: cycles and shared subtrees

  void add(const std::string& name, const Value& v, int depth) {
    LIBAI_CHECK_KIND(CorruptInput, depth <= kMaxDepth, "torch checkpoint ", state.region.name,
                     ": containers nested deeper than ", kMaxDepth, " at '", name, "'");
    switch (v.kind) {
      case Kind::opaque:
        if (v.text == kTorchTensorTag && state.infos.count(name) == 0) {
          state.infos.emplace(name, *static_cast<const TorchTensorInfo*>(v.payload.get()));
          state.names.push_back(name);
        }
        return;
      case Kind::dict:
        if (!visited.insert(&v).second) return;
        for (size_t i = 0; i + 1 < v.items.size(); i += 2) {
          const Value& key = *v.items[i];
          if (!key.is(Kind::string) && !key.is(Kind::integer)) continue;
          add(join(name, leaf_text(key)), *v.items[i + 1], depth + 1);
        }
        return;
      case Kind::list:
      case Kind::tuple:
        if (!visited.insert(&v).second) return;
        for (size_t i = 0; i < v.items.size(); ++i) {
          add(join(name, std::to_string(i)), *v.items[i], depth + 1);
        }
        return;
      case Kind::none:
      case Kind::boolean:
      case Kind::integer:
      case Kind::floating:
      case Kind::string: state.other_values.emplace_back(name, leaf_text(v)); return;
      default: return;  // bytes, globals, bare storages
    }
  }
  static std::string join(const std::string& prefix, const std::string& key) {
    return prefix.empty() ? key : prefix + "." + key;
  }
};

bool is_legacy_torch_file(const ByteRegion& region) {
  // torch < 1.6 wrote a pickled magic number first: PROTO 2, LONG1 of 10 bytes.
  return region.size >= 4 && region.data[0] == 0x80 && region.data[1] == 0x02 &&
         region.data[2] == 0x8a && region.data[3] == 0x0a;
}

std::shared_ptr<TorchCheckpoint::State> parse(ByteRegion region) {
  const std::string file = region.name;
  LIBAI_CHECK_KIND(Unsupported, !is_legacy_torch_file(region), "torch checkpoint ", file,
                   " uses the legacy (pre-1.6, non-zip) format; re-save it with a newer torch");
  auto state = std::make_shared<TorchCheckpoint::State>();
  state->region = std::move(region);
  state->zip = std::make_unique<ZipReader>(state->region);
  const auto& entries = state->zip->entries();
  LIBAI_CHECK_KIND(CorruptInput, !entries.empty(), "torch checkpoint ", file,
                   " is an empty zip archive");
  const std::string& first = entries.front().name;
  const size_t slash = first.find('/');
  LIBAI_CHECK_KIND(CorruptInput, slash != std::string::npos && slash > 0, "torch checkpoint ", file,
                   ": first entry '", first, "' is not inside an archive folder");
  const std::string prefix = first.substr(0, slash);
  state->data_folder = prefix + "/data/";
  if (const ZipEntry* order = state->zip->find(prefix + "/byteorder")) {
    auto bytes = state->zip->read(*order);
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    LIBAI_CHECK_KIND(Unsupported, text == "little", "torch checkpoint ", file,
                     " was saved with byte order '", text, "'; only little-endian is supported");
  }
  const ZipEntry* pkl = state->zip->find(prefix + "/data.pkl");
  LIBAI_CHECK_KIND(CorruptInput, pkl != nullptr, "torch checkpoint ", file, " has no entry ",
                   prefix, "/data.pkl");
  pickle::Unpickler unpickler(state->zip->read(*pkl), file + ":" + pkl->name,
                              torch_pickle_hooks(*state->zip, state->data_folder));
  const Value& root = unpickler.load();
  Flattener{*state, {}}.add("", root, 0);
  return state;
}

}  // namespace

TorchCheckpoint TorchCheckpoint::open(const std::string& path) {
  return TorchCheckpoint(parse(map_file(path)));
}

TorchCheckpoint TorchCheckpoint::open_bytes(const void* data, size_t size, std::string name) {
  return TorchCheckpoint(parse(copy_bytes(data, size, std::move(name))));
}

const std::vector<std::string>& TorchCheckpoint::names() const { return state_->names; }
const std::string& TorchCheckpoint::path() const { return state_->region.name; }

const std::vector<std::pair<std::string, std::string>>& TorchCheckpoint::other_values() const {
  return state_->other_values;
}

bool TorchCheckpoint::contains(const std::string& name) const {
  return state_->infos.count(name) != 0;
}

const TorchTensorInfo& TorchCheckpoint::info(const std::string& name) const {
  auto it = state_->infos.find(name);
  LIBAI_CHECK_KIND(NotFound, it != state_->infos.end(), "torch checkpoint ", path(),
                   " has no tensor '", name, "'");
  return it->second;
}

Tensor TorchCheckpoint::tensor(const std::string& name) const {
  const TorchTensorInfo& meta = info(name);
  Tensor storage;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    // Keyed by dtype too: a crafted pickle may name one entry under two storage types.
    const std::string cache_key = meta.storage_key + "/" + dtype_name(meta.dtype);
    auto it = state_->storages.find(cache_key);
    if (it == state_->storages.end()) {
      // Entry and size were checked against the pickle when it was read.
      const ZipEntry& entry = *state_->zip->find(state_->data_folder + meta.storage_key);
      const int64_t numel = int64_t(entry.size / dtype_size(meta.dtype));
      Tensor base = view_bytes(state_->region, size_t(entry.data_offset), {numel}, meta.dtype);
      it = state_->storages.emplace(cache_key, base).first;
    }
    storage = it->second;
  }
  return storage.as_strided(meta.shape, meta.strides, meta.storage_offset);
}

std::vector<std::pair<std::string, Tensor>> load_torch_checkpoint(const std::string& path) {
  TorchCheckpoint checkpoint = TorchCheckpoint::open(path);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(checkpoint.names().size());
  for (const auto& name : checkpoint.names()) out.emplace_back(name, checkpoint.tensor(name));
  return out;
}

}  // namespace libai::checkpoint
