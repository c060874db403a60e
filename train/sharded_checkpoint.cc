#include "train/sharded_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <tuple>
#include <set>

#include <nlohmann/json.hpp>

#include "models/convert.h"
#include "models/hf_config.h"
#include "ops/view.h"
#include "runtime/autograd.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/safetensors_format.h"
#include "runtime/logging.h"
#include "train/checkpoint_files.h"

namespace libai::train {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using namespace checkpoint_files;

namespace {

constexpr const char* kLayoutFormat = "libai-actor-sharded-checkpoint";
constexpr int kLayoutVersion = 1;

std::string shard_file(int rank) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "shards/rank_%05d.safetensors", rank);
  return buffer;
}

Json shape_json(const Shape& shape) { return Json(std::vector<int64_t>(shape.begin(), shape.end())); }

// A partly replicated parameter's rows of every tp block (Note [Partly replicated parameters]
// in models/module.h): [[[start, length, owner], ...] per block].
Json rows_json(const std::vector<std::vector<models::TpRows>>& rows) {
  Json out = Json::array();
  for (const auto& block : rows) {
    Json b = Json::array();
    for (const models::TpRows& r : block) b.push_back({r.start, r.length, r.owner});
    out.push_back(b);
  }
  return out;
}

std::vector<std::vector<models::TpRows>> rows_from_json(const Json& j, const std::string& where) {
  std::vector<std::vector<models::TpRows>> out;
  if (!j.is_object() || !j.contains("rows")) return out;
  const Json& rows = j["rows"];
  LIBAI_CHECK_KIND(CorruptInput, rows.is_array(), where, ": \"rows\" is not a list");
  for (const Json& b : rows) {
    LIBAI_CHECK_KIND(CorruptInput, b.is_array(), where, ": \"rows\" holds a block that is not a list");
    std::vector<models::TpRows> block;
    for (const Json& r : b) {
      LIBAI_CHECK_KIND(CorruptInput,
                       r.is_array() && r.size() == 3 && r[0].is_number_integer() &&
                           r[1].is_number_integer() && r[2].is_number_integer(),
                       where, ": a range of \"rows\" is not [start, length, owner]: ", r.dump());
      block.push_back({r[0].get<int64_t>(), r[1].get<int64_t>(), r[2].get<int>()});
    }
    out.push_back(std::move(block));
  }
  return out;
}

// One piece's description, as a shard's header carries it (Note [Sharded checkpoint layout]).
Json piece_json(const OwnedSlice& slice, const std::string& key,
                const std::map<std::string, std::string>& state_keys) {
  const models::ParameterInfo& info = slice.info;
  const bool split = info.split_dim >= 0 && info.tp_size > 1;
  Json state = Json::object();
  for (const auto& [k, v] : state_keys) state[k] = v;
  Json out = {{"name", info.name},
          {"shape", shape_json(info.logical_shape)},
          {"dtype", checkpoint::safetensors_dtype_name(slice.values.dtype())},
          {"split_dim", split ? info.split_dim : -1},
          {"tp_rank", split ? info.tp_rank : 0},
          {"tp_size", split ? info.tp_size : 1},
          {"local_shape", shape_json(split ? slice.local_shape : info.logical_shape)},
          {"begin", slice.begin},
          {"end", slice.end},
          {"key", key},
          {"state", state}};
  if (info.partly_replicated()) out["rows"] = rows_json(info.rows);
  return out;
}

// The serialized shard of one rank: its pieces' tensors and their descriptions.
std::string serialize_shard(const std::vector<OwnedSlice>& slices) {
  checkpoint::NamedTensors tensors;
  Json pieces = Json::array();
  // A partly replicated block's copies of another rank's rows are that rank's to write: each
  // row is written once (Note [Partly replicated parameters] in models/module.h).
  std::vector<OwnedSlice> owned;
  for (const OwnedSlice& slice : slices) {
    if (!slice.info.partly_replicated()) {
      owned.push_back(slice);
      continue;
    }
    for (const auto& [begin, end] : slice.info.owned_elements) {
      const int64_t b = std::max(begin, slice.begin), e = std::min(end, slice.end);
      if (b >= e) continue;
      OwnedSlice part = slice;
      part.begin = b;
      part.end = e;
      part.values = ops::narrow(slice.values, 0, b - slice.begin, e - b);
      for (auto& [k, t] : part.state)
        if (t.defined() && t.dim() == 1) t = ops::narrow(t, 0, b - slice.begin, e - b);
      owned.push_back(std::move(part));
    }
  }
  for (const OwnedSlice& slice : owned) {
    const std::string& name = slice.info.name;
    LIBAI_CHECK(slice.values.defined() && slice.values.numel() == slice.end - slice.begin &&
                    slice.begin >= 0 && slice.begin < slice.end,
                "save_sharded_checkpoint: the slice of ", name, " [", slice.begin, ", ",
                slice.end, ") does not hold end - begin values");
    const std::string range = std::to_string(slice.begin) + "/" + name;
    const std::string key = "p/" + range;
    tensors.emplace_back(key, ops::contiguous(slice.values.detach()));
    std::map<std::string, std::string> state_keys;
    for (const auto& [k, t] : slice.state) {
      LIBAI_CHECK(t.defined(), "save_sharded_checkpoint: ", name, "'s state ", k,
                  " is undefined");
      const std::string state_key = "s/" + k + "/" + range;
      state_keys[k] = state_key;
      tensors.emplace_back(state_key, ops::contiguous(t.detach()));
    }
    pieces.push_back(piece_json(slice, key, state_keys));
  }
  return checkpoint::serialize_safetensors(
      tensors, {{"format", "libai-shard"}, {"pieces", pieces.dump()}});
}

// ---- layout.json: building it from the shards, validating it against them ------------------

int64_t get_int(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer())
    LIBAI_THROW(CorruptInput, where, ": \"", key, "\" is missing or not an integer");
  return j[key].get<int64_t>();
}

Shape get_shape(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_array())
    LIBAI_THROW(CorruptInput, where, ": \"", key, "\" is missing or not a list");
  Shape out;
  for (const Json& d : j[key]) {
    LIBAI_CHECK_KIND(CorruptInput, d.is_number_integer() && d.get<int64_t>() >= 0, where, ": \"",
                     key, "\" has a dimension that is not a non-negative integer: ", d.dump());
    out.push_back(d.get<int64_t>());
  }
  return out;
}

std::string get_string(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string())
    LIBAI_THROW(CorruptInput, where, ": \"", key, "\" is missing or not a string");
  return j[key].get<std::string>();
}

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

Json piece_to_json(const Piece& p) {
  Json out = {{"file", p.file},           {"key", p.key},         {"split_dim", p.split_dim},
              {"tp_rank", p.tp_rank},     {"tp_size", p.tp_size}, {"local_shape", shape_json(p.local_shape)},
              {"begin", p.begin},         {"end", p.end}};
  if (!p.rows.empty()) out["rows"] = rows_json(p.rows);
  return out;
}

Json entry_to_json(const Entry& e) {
  Json pieces = Json::array();
  for (const Piece& p : e.pieces) pieces.push_back(piece_to_json(p));
  return {{"shape", shape_json(e.shape)},
          {"dtype", checkpoint::safetensors_dtype_name(e.dtype)},
          {"pieces", pieces}};
}

Entry entry_from_json(const Json& j, const std::string& where) {
  Entry e;
  e.shape = get_shape(j, "shape", where);
  const auto dtype = checkpoint::safetensors_dtype(get_string(j, "dtype", where));
  LIBAI_CHECK_KIND(CorruptInput, dtype.has_value(), where, ": unknown dtype ", j["dtype"].dump());
  e.dtype = *dtype;
  LIBAI_CHECK_KIND(CorruptInput, j.contains("pieces") && j["pieces"].is_array(), where,
                   ": \"pieces\" is missing or not a list");
  for (const Json& pj : j["pieces"]) {
    Piece p;
    p.file = get_string(pj, "file", where);
    p.key = get_string(pj, "key", where);
    p.split_dim = int(get_int(pj, "split_dim", where));
    p.tp_rank = int(get_int(pj, "tp_rank", where));
    p.tp_size = int(get_int(pj, "tp_size", where));
    p.local_shape = get_shape(pj, "local_shape", where);
    p.begin = get_int(pj, "begin", where);
    p.end = get_int(pj, "end", where);
    p.rows = rows_from_json(pj, where);
    e.pieces.push_back(std::move(p));
  }
  return e;
}

bool same_rows(const std::vector<std::vector<models::TpRows>>& a,
               const std::vector<std::vector<models::TpRows>>& b) {
  return rows_json(a) == rows_json(b);
}

int64_t rows_held(const std::vector<models::TpRows>& block) {
  int64_t total = 0;
  for (const models::TpRows& r : block) total += r.length;
  return total;
}

// A partly replicated piece's rows: one list per tp block, within the tensor, split along dim
// 0, every row of it owned by exactly one block that holds it.
void check_rows(const Piece& p, const Shape& shape, const std::string& where) {
  LIBAI_CHECK_KIND(CorruptInput, p.split_dim == 0 && int(p.rows.size()) == p.tp_size, where,
                   ": \"rows\" of ", p.rows.size(), " blocks for a split of dim ", p.split_dim,
                   " over ", p.tp_size, " ranks (", p.file, ")");
  std::vector<int> owners(size_t(shape[0]), -1);
  for (int t = 0; t < p.tp_size; ++t)
    for (const models::TpRows& r : p.rows[size_t(t)]) {
      LIBAI_CHECK_KIND(CorruptInput,
                       r.start >= 0 && r.length > 0 && r.start + r.length <= shape[0] &&
                           r.owner >= 0 && r.owner < p.tp_size,
                       where, ": rows [", r.start, ", +", r.length, ") owned by ", r.owner,
                       " of tp block ", t, " do not fit ", shape_str(shape), " (", p.file, ")");
      for (int64_t i = r.start; i < r.start + r.length; ++i) {
        LIBAI_CHECK_KIND(CorruptInput, owners[size_t(i)] == -1 || owners[size_t(i)] == r.owner,
                         where, ": row ", i, " has two owners (", p.file, ")");
        owners[size_t(i)] = r.owner;
      }
    }
  for (int t = 0; t < p.tp_size; ++t)
    for (const models::TpRows& r : p.rows[size_t(t)])
      if (r.owner != t) {
        bool held = false;
        for (const models::TpRows& o : p.rows[size_t(r.owner)])
          held = held || (o.owner == r.owner && o.start <= r.start &&
                          r.start + r.length <= o.start + o.length);
        LIBAI_CHECK_KIND(CorruptInput, held, where, ": rows [", r.start, ", +", r.length,
                         ") of tp block ", t, " name owner ", r.owner, ", which does not hold them (",
                         p.file, ")");
      }
  for (size_t i = 0; i < owners.size(); ++i)
    LIBAI_CHECK_KIND(CorruptInput, owners[i] >= 0, where, ": row ", i, " is in no tp block (",
                     p.file, ")");
}

// Every check a reader needs before it makes a tensor: the pieces fit their tensor's layout,
// their file holds each key with the shape and dtype said, and (a tensor with elements) the
// pieces of every tp block tile it exactly. `what` names the tensor in errors.
void validate_entry(const Entry& e, const std::string& what,
                    const std::map<std::string, checkpoint::SafetensorsFile>& files,
                    const fs::path& layout_path) {
  const std::string where = str_cat(layout_path.string(), ": ", what);
  LIBAI_CHECK_KIND(CorruptInput, !e.pieces.empty(), where, " has no pieces");
  const bool scalar = e.shape.empty();
  const Piece& first = e.pieces[0];
  for (const Piece& p : e.pieces) {
    auto file = files.find(p.file);
    LIBAI_CHECK_KIND(CorruptInput, file != files.end(), where, ": its piece names ", p.file,
                     ", which is not one of the checkpoint's files");
    const std::string in_file = str_cat(file->second.path(), " (", what, ")");
    LIBAI_CHECK_KIND(CorruptInput, file->second.contains(p.key), in_file, " has no tensor ", p.key);
    const checkpoint::SafetensorsInfo& info = file->second.info(p.key);
    LIBAI_CHECK_KIND(CorruptInput, info.dtype == e.dtype, in_file, ": ", p.key, " is ",
                     dtype_name(info.dtype), ", layout.json says ", dtype_name(e.dtype));
    if (scalar) {
      LIBAI_CHECK_KIND(CorruptInput, info.shape.empty(), in_file, ": ", p.key, " has shape ",
                       shape_str(info.shape), ", a scalar expected");
      continue;
    }
    LIBAI_CHECK_KIND(CorruptInput,
                     p.tp_size == first.tp_size && p.split_dim == first.split_dim &&
                         p.local_shape == first.local_shape && same_rows(p.rows, first.rows),
                     where, ": its pieces disagree on the tensor-parallel split (", p.file, ")");
    LIBAI_CHECK_KIND(CorruptInput, p.tp_size >= 1 && p.tp_rank >= 0 && p.tp_rank < p.tp_size,
                     where, ": tp rank ", p.tp_rank, " of ", p.tp_size, " (", p.file, ")");
    LIBAI_CHECK_KIND(CorruptInput,
                     p.split_dim >= -1 && p.split_dim < int(e.shape.size()) &&
                         (p.split_dim >= 0 || p.tp_size == 1),
                     where, ": split dim ", p.split_dim, " of a tensor of shape ",
                     shape_str(e.shape), " over ", p.tp_size, " ranks (", p.file, ")");
    LIBAI_CHECK_KIND(CorruptInput, p.local_shape.size() == e.shape.size(), where,
                     ": local shape ", shape_str(p.local_shape), " of a tensor of shape ",
                     shape_str(e.shape), " (", p.file, ")");
    if (!p.rows.empty()) check_rows(p, e.shape, where);
    for (size_t d = 0; d < e.shape.size(); ++d) {
      const int64_t expected = int(d) == p.split_dim
                                   ? (p.rows.empty() ? (e.shape[d] + p.tp_size - 1) / p.tp_size
                                                     : rows_held(p.rows[size_t(p.tp_rank)]))
                                   : e.shape[d];
      LIBAI_CHECK_KIND(CorruptInput, p.local_shape[d] == expected, where, ": local shape ",
                       shape_str(p.local_shape), " is not a block of ", shape_str(e.shape),
                       " over ", p.tp_size, " ranks (", p.file, ")");
    }
    const int64_t numel = shape_numel(p.local_shape);
    LIBAI_CHECK_KIND(CorruptInput, 0 <= p.begin && p.begin < p.end && p.end <= numel, in_file,
                     ": piece [", p.begin, ", ", p.end, ") is outside the tp block of ", numel,
                     " elements");
    LIBAI_CHECK_KIND(CorruptInput, info.shape == Shape{p.end - p.begin}, in_file, ": ", p.key,
                     " has shape ", shape_str(info.shape), ", the piece [", p.begin, ", ", p.end,
                     ") needs [", p.end - p.begin, "]");
  }
  if (scalar) return;
  // Coverage: per tp block, the sorted pieces run from 0 to its end without gap or overlap;
  // a partly replicated block's pieces hold exactly the rows it owns.
  std::map<int, std::vector<const Piece*>> by_block;
  for (const Piece& p : e.pieces) by_block[p.tp_rank].push_back(&p);
  const int64_t numel = shape_numel(first.local_shape);
  for (int t = 0; t < first.tp_size; ++t) {
    std::vector<std::pair<int64_t, int64_t>> owned{{0, numel}};
    if (!first.rows.empty()) {
      owned.clear();
      const int64_t row = numel / std::max<int64_t>(first.local_shape[0], 1);
      int64_t at = 0;
      for (const models::TpRows& r : first.rows[size_t(t)]) {
        if (r.owner == t && !owned.empty() && owned.back().second == at * row)
          owned.back().second = (at + r.length) * row;
        else if (r.owner == t)
          owned.emplace_back(at * row, (at + r.length) * row);
        at += r.length;
      }
      if (owned.empty()) continue;
    }
    LIBAI_CHECK_KIND(CorruptInput, by_block.count(t), where, ": no piece holds tp block ", t,
                     " of ", first.tp_size);
    auto& pieces = by_block[t];
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece* a, const Piece* b) { return a->begin < b->begin; });
    size_t next = 0;  // the owned range being covered
    int64_t at = owned[0].first;
    const Piece* previous = nullptr;
    for (const Piece* p : pieces) {
      if (p->begin < at)
        LIBAI_THROW(CorruptInput, where, ": pieces overlap in tp block ", t, ": [",
                    previous ? previous->begin : 0, ", ", previous ? previous->end : 0, ") in ",
                    previous ? previous->file : "", " and [", p->begin, ", ", p->end, ") in ",
                    p->file);
      if (at == owned[next].second && next + 1 < owned.size()) at = owned[++next].first;
      if (p->begin > at)
        LIBAI_THROW(CorruptInput, where, ": elements [", at, ", ", p->begin, ") of tp block ", t,
                    " are in no piece (next piece in ", p->file, ")");
      LIBAI_CHECK_KIND(CorruptInput, p->end <= owned[next].second, where, ": piece [", p->begin,
                       ", ", p->end, ") of tp block ", t, " in ", p->file,
                       " holds rows another block owns");
      at = p->end;
      previous = p;
    }
    LIBAI_CHECK_KIND(CorruptInput, at == owned.back().second && next + 1 == owned.size(), where,
                     ": elements [", at, ", ", owned.back().second, ") of tp block ", t,
                     " are in no piece");
  }
}

struct ParsedLayout {
  ShardedLayout layout;
  std::map<std::string, checkpoint::SafetensorsFile> files;
  std::map<std::string, ParamEntry> parameters;
};

// Reads and validates folder/layout.json and every file it names.
ParsedLayout parse_layout(const fs::path& folder) {
  const fs::path path = folder / "layout.json";
  LIBAI_CHECK_KIND(NotFound, fs::is_regular_file(path), "load_checkpoint: ", folder.string(),
                   " has no layout.json");
  const Json j = read_json(path);
  const std::string where = path.string();
  LIBAI_CHECK_KIND(CorruptInput, j.is_object() && j.value("format", "") == kLayoutFormat, where,
                   " is not a sharded checkpoint's layout (format \"", kLayoutFormat,
                   "\" expected)");
  LIBAI_CHECK_KIND(Unsupported, get_int(j, "format_version", where) <= kLayoutVersion, where,
                   " has format version ", j["format_version"].dump(), "; this build reads up to ",
                   kLayoutVersion);
  ParsedLayout out;
  const Json& l = j.contains("layout") ? j["layout"] : Json();
  out.layout = {.dp = int(get_int(l, "dp", where + " layout")),
                .tp = int(get_int(l, "tp", where + " layout")),
                .pp = int(get_int(l, "pp", where + " layout")),
                .virtual_stages = int(get_int(l, "virtual_stages", where + " layout")),
                .zero_stage = int(get_int(l, "zero_stage", where + " layout"))};
  LIBAI_CHECK_KIND(CorruptInput, j.contains("files") && j["files"].is_array(), where,
                   ": \"files\" is missing or not a list");
  for (const Json& f : j["files"]) {
    LIBAI_CHECK_KIND(CorruptInput, f.is_string(), where, ": a file name is not a string");
    const std::string name = f.get<std::string>();
    // Only shards/rank_NNNNN.safetensors: a layout never points outside its folder.
    LIBAI_CHECK_KIND(CorruptInput,
                     name.rfind("shards/rank_", 0) == 0 && name.find("..") == std::string::npos &&
                         name.find('/', 7) == std::string::npos,
                     where, ": file name \"", name, "\" is not shards/rank_NNNNN.safetensors");
    const fs::path file = folder / name;
    LIBAI_CHECK_KIND(NotFound, fs::is_regular_file(file), "load_checkpoint: ", file.string(),
                     " is missing (layout.json names it)");
    out.files.emplace(name, checkpoint::SafetensorsFile::open(file.string()));
  }
  LIBAI_CHECK_KIND(CorruptInput, j.contains("parameters") && j["parameters"].is_object(), where,
                   ": \"parameters\" is missing or not an object");
  for (auto it = j["parameters"].begin(); it != j["parameters"].end(); ++it) {
    ParamEntry entry;
    entry.values = entry_from_json(it.value(), where + ": parameter " + it.key());
    validate_entry(entry.values, "parameter " + it.key(), out.files, path);
    if (it.value().contains("state")) {
      const Json& state = it.value()["state"];
      LIBAI_CHECK_KIND(CorruptInput, state.is_object(), where, ": parameter ", it.key(),
                       ": \"state\" is not an object");
      for (auto s = state.begin(); s != state.end(); ++s) {
        const std::string what = str_cat("optimizer state ", s.key(), " of ", it.key());
        Entry e = entry_from_json(s.value(), where + ": " + what);
        validate_entry(e, what, out.files, path);
        LIBAI_CHECK_KIND(CorruptInput, e.shape.empty() || e.shape == entry.values.shape, where,
                         ": ", what, " has shape ", shape_str(e.shape), ", its parameter ",
                         shape_str(entry.values.shape));
        entry.state.emplace(s.key(), std::move(e));
      }
    }
    out.parameters.emplace(it.key(), std::move(entry));
  }
  return out;
}

// layout.json from the shards written to `temp` (world rank 0 after every rank has synced).
// A piece written by several ranks alike (an unsplit parameter's block, or its ZeRO range,
// held by every tp rank) is kept once; pieces that partly overlap are left for validation.
Json build_layout(const fs::path& temp, const std::vector<int>& writers,
                  const ShardedLayout& layout, int world_size) {
  Json files = Json::array();
  std::map<std::string, ParamEntry> parameters;
  std::set<std::tuple<std::string, std::string, int, int64_t, int64_t>> seen;
  for (int rank : writers) {
    const std::string name = shard_file(rank);
    const auto file = checkpoint::SafetensorsFile::open((temp / name).string());
    files.push_back(name);
    const auto meta = file.metadata().find("pieces");
    LIBAI_CHECK_KIND(CorruptInput, meta != file.metadata().end(), file.path(),
                     " has no pieces in its metadata");
    for (const Json& pj : Json::parse(meta->second)) {
      const std::string where = file.path();
      const std::string param = get_string(pj, "name", where);
      Piece p{.file = name,
              .key = get_string(pj, "key", where),
              .split_dim = int(get_int(pj, "split_dim", where)),
              .tp_rank = int(get_int(pj, "tp_rank", where)),
              .tp_size = int(get_int(pj, "tp_size", where)),
              .local_shape = get_shape(pj, "local_shape", where),
              .begin = get_int(pj, "begin", where),
              .end = get_int(pj, "end", where),
              .rows = rows_from_json(pj, where)};
      if (!seen.emplace(param, "", p.tp_rank, p.begin, p.end).second) continue;
      ParamEntry& entry = parameters[param];
      entry.values.shape = get_shape(pj, "shape", where);
      entry.values.dtype = file.info(p.key).dtype;
      entry.values.pieces.push_back(p);
      for (auto s = pj["state"].begin(); s != pj["state"].end(); ++s) {
        Piece sp = p;
        sp.key = s.value().get<std::string>();
        const checkpoint::SafetensorsInfo& info = file.info(sp.key);
        Entry& e = entry.state[s.key()];
        e.dtype = info.dtype;
        e.shape = info.shape.empty() ? Shape{} : entry.values.shape;
        e.pieces.push_back(sp);
      }
    }
  }
  Json params = Json::object();
  for (const auto& [name, entry] : parameters) {
    Json j = entry_to_json(entry.values);
    Json state = Json::object();
    for (const auto& [key, e] : entry.state) state[key] = entry_to_json(e);
    j["state"] = state;
    params[name] = j;
  }
  return {{"format", kLayoutFormat},
          {"format_version", kLayoutVersion},
          {"layout",
           {{"dp", layout.dp},
            {"tp", layout.tp},
            {"pp", layout.pp},
            {"virtual_stages", layout.virtual_stages},
            {"zero_stage", layout.zero_stage},
            {"world_size", world_size}}},
          {"files", files},
          {"parameters", params}};
}

// Every rank's count of pieces written (or -1: it failed), over `world`.
std::vector<double> agree(comm::Communicator* world, double mine) {
  if (!world) return {mine};
  Tensor t = Tensor::zeros({world->size()}, DType::f64);
  static_cast<double*>(t.data_ptr())[world->rank()] = mine;
  world->all_reduce(t);
  return t.to_vector<double>();
}

void check_agreed(const std::vector<double>& counts, const std::exception_ptr& own,
                  const char* phase) {
  if (own) std::rethrow_exception(own);
  for (size_t r = 0; r < counts.size(); ++r)
    LIBAI_CHECK_KIND(IoError, counts[r] >= 0, "save_sharded_checkpoint: world rank ", r,
                     " failed while ", phase, " (its log names the error)");
}

// The whole tensor of an entry, assembled from its pieces (validated at open).
Tensor assemble(const Entry& e, const std::map<std::string, checkpoint::SafetensorsFile>& files) {
  if (e.shape.empty()) return files.at(e.pieces[0].file).tensor(e.pieces[0].key).clone_raw();
  const Piece& first = e.pieces[0];
  const size_t element = dtype_size(e.dtype);
  std::vector<Tensor> blocks;
  for (int t = 0; t < first.tp_size; ++t) blocks.push_back(Tensor::empty(first.local_shape, e.dtype));
  for (const Piece& p : e.pieces) {
    Tensor piece = files.at(p.file).tensor(p.key);
    if (!piece.is_contiguous()) piece = piece.clone_raw();
    std::memcpy(static_cast<char*>(blocks[size_t(p.tp_rank)].data_ptr()) + size_t(p.begin) * element,
                piece.data_ptr(), size_t(p.end - p.begin) * element);
  }
  if (first.tp_size == 1) return blocks[0];
  if (!first.rows.empty()) {  // each row from the block that owns it
    models::ParameterInfo info;
    info.split_dim = 0;
    info.logical_shape = e.shape;
    info.tp_size = first.tp_size;
    info.rows = first.rows;
    return models::whole_of_blocks(blocks, info);
  }
  Tensor whole = Tensor::empty(e.shape, e.dtype);
  const int d = first.split_dim;
  const int64_t part = first.local_shape[size_t(d)];
  for (int t = 0; t < first.tp_size; ++t) {
    const int64_t start = t * part;
    const int64_t length = std::clamp<int64_t>(e.shape[size_t(d)] - start, 0, part);
    if (length > 0)
      ops::narrow(whole, d, start, length).copy_from(ops::narrow(blocks[size_t(t)], d, 0, length));
  }
  return whole;
}

}  // namespace

// ---- saving ---------------------------------------------------------------------------------

fs::path save_sharded_checkpoint(const fs::path& output_dir, const std::string& name,
                                 const std::vector<OwnedSlice>& slices, comm::Communicator* world,
                                 const ShardedLayout& layout, const models::Model& model,
                                 Optimizer& optimizer, int64_t optimizer_steps,
                                 const GradScaler* scaler, const TrainingProgress& progress,
                                 int max_to_keep, const SaveOptions& options,
                                 bool whole_weights) {
  check_name(name);
  autograd::NoGradGuard no_grad;
  const int rank = world ? world->rank() : 0;
  const int size = world ? world->size() : 1;
  // One temp folder for every rank (a pid would differ between processes).
  const fs::path temp = output_dir / (".tmp-" + name + "-sharded");
  std::exception_ptr failure;
  auto attempt = [&](const std::function<void()>& body) {
    try {
      body();
    } catch (const Error& e) {
      failure = std::current_exception();
      logger("train")->error("checkpoint {}: {}", name, e.what());
    }
  };

  // 1. World rank 0 clears leftovers and makes the temp folder before anyone writes there.
  if (rank == 0)
    attempt([&] {
      fs::create_directories(output_dir);
      remove_stale(output_dir);
      at_phase("start");
      fs::create_directories(temp / "shards");
    });
  check_agreed(agree(world, failure ? -1 : 0), failure, "preparing the checkpoint folder");

  // 2. Every rank that owns something writes and syncs its shard.
  attempt([&] {
    if (!slices.empty()) write_file_synced(temp / shard_file(rank), serialize_shard(slices));
  });
  const std::vector<double> counts = agree(world, failure ? -1 : double(slices.size()));
  check_agreed(counts, failure, "writing its shard");

  // 3. World rank 0 indexes the shards, writes the metadata and publishes the folder.
  if (rank == 0)
    attempt([&] {
      fsync_directory(temp / "shards");
      std::vector<int> writers;
      for (int r = 0; r < size; ++r)
        if (counts[size_t(r)] > 0) writers.push_back(r);
      write_file_synced(temp / "layout.json",
                        build_layout(temp, writers, layout, size).dump(1) + "\n");
      // What a reader will check, before the folder gets its name.
      const ParsedLayout parsed = parse_layout(temp);
      if (whole_weights) {
        checkpoint::NamedTensors weights;
        for (const auto& [param, entry] : parsed.parameters)
          weights.emplace_back(param, assemble(entry.values, parsed.files));
        write_file_synced(temp / "model.safetensors",
                          checkpoint::serialize_safetensors(
                              weights, {{"format", "libai"},
                                        {"model_type", model.config().model_type()}}));
      }
      write_model_files(temp, model, options);
      write_file_synced(temp / "trainer.json",
                        trainer_json(progress, optimizer.groups(), optimizer_steps, scaler, options)
                                .dump(2) +
                            "\n");
      fsync_directory(temp);
      at_phase("files_synced");
      publish(temp, output_dir, name, max_to_keep);
      logger("train")->info("saved checkpoint {} (iteration {}, sharded over {} files)",
                            (output_dir / name).string(), progress.iteration, writers.size());
    });
  check_agreed(agree(world, failure ? -1 : 0), failure, "publishing the checkpoint");
  return output_dir / name;
}

// ---- reading --------------------------------------------------------------------------------

bool is_numbered_checkpoint(const std::string& name) {
  if (name.size() < 13 || name.rfind("model_", 0) != 0) return false;
  return std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_sharded_checkpoint(const fs::path& folder) {
  std::error_code ec;
  return fs::is_regular_file(folder / "layout.json", ec);
}

bool sharded_checkpoint_complete(const fs::path& folder) {
  try {
    parse_layout(folder);
    read_trainer(folder);
    return fs::is_regular_file(folder / "config.json");
  } catch (const Error&) {
    return false;
  } catch (const std::exception&) {
    return false;
  }
}

struct CheckpointReader::Impl {
  fs::path folder;
  bool sharded = false;
  TrainingProgress progress;
  int64_t optimizer_steps = 0;
  ShardedLayout layout;
  // Sharded.
  ParsedLayout parsed;
  // Whole: the two files, and each parameter's state keys in optimizer.safetensors.
  std::optional<checkpoint::SafetensorsFile> model, optimizer;
  std::map<std::string, std::map<std::string, std::string>> state_names;
};

CheckpointReader CheckpointReader::open(const fs::path& folder) {
  LIBAI_CHECK_KIND(NotFound, fs::is_directory(folder), "load_checkpoint: ", folder.string(),
                   " is not a folder");
  auto impl = std::make_shared<Impl>();
  impl->folder = folder;
  const Json trainer = read_trainer(folder);
  impl->progress = parse_progress(trainer, folder);
  impl->optimizer_steps = optimizer_steps_of(trainer, folder);
  LIBAI_CHECK_KIND(NotFound, fs::is_regular_file(folder / "config.json"), "load_checkpoint: ",
                   folder.string(), " has no config.json");
  impl->sharded = is_sharded_checkpoint(folder);
  if (impl->sharded) {
    impl->parsed = parse_layout(folder);
    impl->layout = impl->parsed.layout;
    // Every shard is read whole (a rank assembles whole tensors): ask the kernel for all of
    // them now, so the disk streams them while the first tensors are assembled instead of
    // faulting the mappings in page by page.
    for (const auto& [name, file] : impl->parsed.files) {
      const int fd = ::open((folder / name).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // opened a moment ago; a reader error will name it
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
      ::close(fd);
    }
  } else {
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      LIBAI_CHECK_KIND(NotFound, fs::is_regular_file(folder / file), "load_checkpoint: ",
                       folder.string(), " has neither layout.json nor ", file,
                       " (not a complete training checkpoint)");
    impl->model = checkpoint::SafetensorsFile::open((folder / "model.safetensors").string());
    impl->optimizer = checkpoint::SafetensorsFile::open((folder / "optimizer.safetensors").string());
    for (const auto& key : impl->optimizer->names()) {
      const size_t dot = key.rfind('.');
      if (dot == std::string::npos) continue;  // the optimizer's own "step"
      const std::string param = key.substr(0, dot);
      LIBAI_CHECK_KIND(CorruptInput, impl->model->contains(param), impl->optimizer->path(),
                       ": ", key, " is the state of ", param,
                       ", which model.safetensors does not have");
      const Shape& shape = impl->optimizer->info(key).shape;
      const std::string field = key.substr(dot + 1);
      LIBAI_CHECK_KIND(CorruptInput,
                       shape.empty() || shape == impl->model->info(param).shape,
                       impl->optimizer->path(), ": ", key, " has shape ", shape_str(shape),
                       ", its parameter ", shape_str(impl->model->info(param).shape));
      impl->state_names[param][field] = key;
    }
  }
  CheckpointReader reader;
  reader.impl_ = std::move(impl);
  return reader;
}

const fs::path& CheckpointReader::folder() const { return impl_->folder; }
bool CheckpointReader::sharded() const { return impl_->sharded; }
const TrainingProgress& CheckpointReader::progress() const { return impl_->progress; }
int64_t CheckpointReader::optimizer_steps() const { return impl_->optimizer_steps; }
const ShardedLayout& CheckpointReader::saved_layout() const { return impl_->layout; }

std::vector<std::string> CheckpointReader::parameter_names() const {
  std::vector<std::string> out;
  if (impl_->sharded) {
    for (const auto& [name, entry] : impl_->parsed.parameters) out.push_back(name);
  } else {
    out = impl_->model->names();
    std::sort(out.begin(), out.end());
  }
  return out;
}

bool CheckpointReader::has_parameter(const std::string& name) const {
  return impl_->sharded ? impl_->parsed.parameters.count(name) > 0
                        : impl_->model->contains(name);
}

Shape CheckpointReader::parameter_shape(const std::string& name) const {
  LIBAI_CHECK_KIND(NotFound, has_parameter(name), "checkpoint ", impl_->folder.string(),
                   " has no parameter ", name);
  return impl_->sharded ? impl_->parsed.parameters.at(name).values.shape
                        : impl_->model->info(name).shape;
}

Tensor CheckpointReader::parameter(const std::string& name) const {
  LIBAI_CHECK_KIND(NotFound, has_parameter(name), "checkpoint ", impl_->folder.string(),
                   " has no parameter ", name);
  if (!impl_->sharded) return impl_->model->tensor(name);
  return assemble(impl_->parsed.parameters.at(name).values, impl_->parsed.files);
}

std::vector<std::string> CheckpointReader::state_keys(const std::string& name) const {
  std::vector<std::string> out;
  if (impl_->sharded) {
    auto it = impl_->parsed.parameters.find(name);
    if (it != impl_->parsed.parameters.end())
      for (const auto& [key, e] : it->second.state) out.push_back(key);
  } else {
    auto it = impl_->state_names.find(name);
    if (it != impl_->state_names.end())
      for (const auto& [key, file_key] : it->second) out.push_back(key);
  }
  return out;
}

Tensor CheckpointReader::state(const std::string& name, const std::string& key) const {
  if (impl_->sharded) {
    auto it = impl_->parsed.parameters.find(name);
    if (it == impl_->parsed.parameters.end()) return {};
    auto s = it->second.state.find(key);
    return s == it->second.state.end() ? Tensor() : assemble(s->second, impl_->parsed.files);
  }
  auto it = impl_->state_names.find(name);
  if (it == impl_->state_names.end()) return {};
  auto s = it->second.find(key);
  return s == it->second.end() ? Tensor() : impl_->optimizer->tensor(s->second);
}

Tensor tp_block(const Tensor& whole, const models::ParameterInfo& info, const Shape& block_shape) {
  return models::tp_block_of(whole, info, info.tp_rank, block_shape);
}

TrainingProgress load_checkpoint_from(const CheckpointReader& reader,
                                      const std::vector<models::Model*>& parts,
                                      Optimizer& optimizer, GradScaler* scaler, bool whole) {
  LIBAI_CHECK(!parts.empty(), "load_checkpoint: no model part to load");
  autograd::NoGradGuard no_grad;
  const fs::path& folder = reader.folder();
  check_config(folder, *parts[0]);
  const std::string source = str_cat(folder.string(), reader.sharded() ? " (sharded)" : "");

  std::map<std::string, models::ParameterInfo> infos;
  std::vector<std::string> problems;
  for (models::Model* part : parts)
    for (auto& info : part->parameter_infos()) {
      infos.emplace(info.name, info);
      if (!reader.has_parameter(info.name)) {
        problems.push_back(str_cat("missing ", info.name, " ", shape_str(info.logical_shape)));
        continue;
      }
      const Shape saved = reader.parameter_shape(info.name);
      if (saved != info.logical_shape) {
        problems.push_back(str_cat("shape mismatch for ", info.name, ": expected ",
                                   shape_str(info.logical_shape), ", checkpoint has ",
                                   shape_str(saved)));
        continue;
      }
      info.tensor->copy_from(tp_block(reader.parameter(info.name), info, info.tensor->shape()));
    }
  if (whole)
    for (const auto& name : reader.parameter_names())
      if (!infos.count(name)) problems.push_back(str_cat(name, " is not a parameter of the model"));
  if (!problems.empty()) {
    std::string message = str_cat("load_checkpoint: ", source, ": ", problems.size(),
                                  " problem", problems.size() > 1 ? "s" : "", ":");
    for (size_t i = 0; i < problems.size() && i < 16; ++i) message += "\n  " + problems[i];
    LIBAI_THROW(CorruptInput, message);
  }

  // The optimizer state of the parts' parameters, cut like them.
  std::map<std::string, Tensor> state;
  state.emplace("step", Tensor::scalar(double(reader.optimizer_steps()), DType::i64));
  for (const auto& [name, info] : infos)
    for (const auto& key : reader.state_keys(name)) {
      Tensor t = reader.state(name, key);
      if (t.dim() > 0) t = tp_block(t, info, info.tensor->shape());
      state.emplace(name + "." + key, t);
    }
  try {
    optimizer.load_state_tensors(state);
  } catch (const Error& e) {
    detail::throw_error(e.kind(), str_cat("load_checkpoint: ", source, ": ", e.what()));
  }
  restore_scaler(reader.progress(), folder, scaler);
  return reader.progress();
}

TrainingProgress load_stage_checkpoint(const CheckpointReader& reader,
                                       const std::vector<models::Model*>& parts,
                                       StageStep& step) {
  LIBAI_CHECK(!parts.empty(), "load_checkpoint: no model part to load");
  const fs::path& folder = reader.folder();
  check_config(folder, *parts[0]);
  std::map<std::string, models::ParameterInfo> infos;
  for (models::Model* part : parts)
    for (auto& info : part->parameter_infos()) infos.emplace(info.name, info);
  auto info_of = [&](const std::string& name) -> const models::ParameterInfo* {
    auto it = infos.find(name);
    return it == infos.end() ? nullptr : &it->second;
  };
  auto block = [&](const std::string& name) -> Tensor {
    const models::ParameterInfo* info = info_of(name);
    if (!info || !reader.has_parameter(name)) return {};
    const Shape saved = reader.parameter_shape(name);
    LIBAI_CHECK_KIND(CorruptInput, saved == info->logical_shape, "load_checkpoint: ",
                     folder.string(), ": ", name, " has shape ", shape_str(saved),
                     ", the model's is ", shape_str(info->logical_shape));
    return tp_block(reader.parameter(name), *info, info->tensor->shape());
  };
  auto state = [&](const std::string& name, const std::string& key) -> Tensor {
    const models::ParameterInfo* info = info_of(name);
    Tensor t = info ? reader.state(name, key) : Tensor();
    if (!t.defined() || t.dim() == 0) return t;
    return tp_block(t, *info, info->tensor->shape());
  };
  try {
    step.load_state(block, state, reader.optimizer_steps());
  } catch (const Error& e) {
    detail::throw_error(e.kind(), str_cat("load_checkpoint: ", folder.string(), ": ", e.what()));
  }
  restore_scaler(reader.progress(), folder, step.scaler());
  step.set_steps_done(reader.progress().iteration);
  return reader.progress();
}

void merge_checkpoint(const fs::path& folder, const fs::path& out_dir) {
  const CheckpointReader reader = CheckpointReader::open(folder);
  LIBAI_CHECK(fs::weakly_canonical(folder) != fs::weakly_canonical(out_dir),
              "checkpoint merge: the destination ", out_dir.string(), " is the checkpoint folder");
  auto model = models::create_model(models::HfConfig::load(folder), {});
  {
    autograd::NoGradGuard no_grad;
    std::vector<std::string> problems;
    std::set<std::string> held;
    for (auto& info : model->parameter_infos()) {
      held.insert(info.name);
      if (!reader.has_parameter(info.name) ||
          reader.parameter_shape(info.name) != info.logical_shape) {
        problems.push_back(info.name);
        continue;
      }
      info.tensor->copy_from(reader.parameter(info.name));
    }
    for (const auto& name : reader.parameter_names())
      if (!held.count(name)) problems.push_back(name + " (not a parameter of the model)");
    if (!problems.empty()) {
      std::string list;
      for (size_t i = 0; i < problems.size() && i < 8; ++i) list += str_cat(i ? ", " : "", problems[i]);
      LIBAI_THROW(CorruptInput, "checkpoint merge: ", folder.string(),
                  " does not hold its config.json's model: missing, misshapen or extra ",
                  problems.size(), " tensor(s): ", list, problems.size() > 8 ? ", ..." : "");
    }
  }
  fs::create_directories(out_dir);
  for (const char* file : {"config.json", "generation_config.json", "tokenizer.json",
                           "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                           "vocab.json", "merges.txt", "spiece.model", "preprocessor_config.json"})
    if (fs::is_regular_file(folder / file))
      fs::copy_file(folder / file, out_dir / file, fs::copy_options::overwrite_existing);
  for (const char* stale : {"model.safetensors.index.json", "pytorch_model.bin"})
    if (fs::exists(out_dir / stale)) fs::remove(out_dir / stale);
  models::save_model_weights(*model, out_dir, models::CheckpointLayout::hf);
}

}  // namespace libai::train
