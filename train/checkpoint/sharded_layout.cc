// layout.json and the shard files of the sharded format (sharded_layout.h).
#include "train/checkpoint/sharded_layout.h"

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
#include "train/checkpoint/folder.h"

namespace libai::train::sharded_layout {

namespace fs = std::filesystem;
using namespace checkpoint_files;

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

}  // namespace libai::train::sharded_layout
