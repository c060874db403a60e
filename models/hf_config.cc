#include "models/hf_config.h"

#include <fstream>

#include "models/gguf.h"
#include "runtime/error.h"

namespace libai::models {

namespace fs = std::filesystem;

HfConfig HfConfig::load(const fs::path& folder_or_file) {
  LIBAI_CHECK_KIND(NotFound, fs::exists(folder_or_file), "model: ", folder_or_file.string(),
                   " does not exist (expected a model folder with config.json)");
  if (is_gguf(folder_or_file)) return gguf_config(folder_or_file);
  fs::path path = fs::is_directory(folder_or_file) ? folder_or_file / "config.json" : folder_or_file;
  LIBAI_CHECK_KIND(NotFound, fs::exists(path), "model config: ", path.string(), " does not exist");
  std::ifstream in(path);
  LIBAI_CHECK_KIND(IoError, in.good(), "model config: cannot read ", path.string());
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    LIBAI_CHECK_KIND(CorruptInput, false, "model config: ", path.string(), " is not valid JSON: ",
                     e.what());
  }
  LIBAI_CHECK_KIND(CorruptInput, json.is_object(), "model config: ", path.string(),
                   " is not a JSON object");
  return from_json(std::move(json), path.string());
}

HfConfig HfConfig::from_json(nlohmann::json json, std::string path) {
  HfConfig c;
  c.json_ = std::move(json);
  c.path_ = std::move(path);
  return c;
}

bool HfConfig::has(const std::string& key) const {
  return json_.contains(key) && !json_[key].is_null();
}

int64_t HfConfig::get_int(const std::string& key, int64_t fallback) const {
  if (!has(key)) return fallback;
  const auto& v = json_[key];
  LIBAI_CHECK_KIND(CorruptInput, v.is_number_integer() || v.is_number_unsigned(), path_, ": \"",
                   key, "\" should be an integer, got ", v.dump());
  return v.get<int64_t>();
}

int64_t HfConfig::require_int(const std::string& key) const {
  LIBAI_CHECK_KIND(CorruptInput, has(key), path_, ": required key \"", key, "\" is missing");
  return get_int(key, 0);
}

double HfConfig::get_double(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const auto& v = json_[key];
  LIBAI_CHECK_KIND(CorruptInput, v.is_number(), path_, ": \"", key, "\" should be a number, got ",
                   v.dump());
  return v.get<double>();
}

bool HfConfig::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& v = json_[key];
  LIBAI_CHECK_KIND(CorruptInput, v.is_boolean(), path_, ": \"", key, "\" should be true or false, got ",
                   v.dump());
  return v.get<bool>();
}

std::string HfConfig::get_string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const auto& v = json_[key];
  LIBAI_CHECK_KIND(CorruptInput, v.is_string(), path_, ": \"", key, "\" should be a string, got ",
                   v.dump());
  return v.get<std::string>();
}

std::vector<int64_t> HfConfig::get_int_list(const std::string& key) const {
  if (!has(key)) return {};
  const auto& v = json_[key];
  if (v.is_number_integer()) return {v.get<int64_t>()};
  LIBAI_CHECK_KIND(CorruptInput, v.is_array(), path_, ": \"", key,
                   "\" should be an integer or a list of integers, got ", v.dump());
  std::vector<int64_t> out;
  for (const auto& x : v) {
    LIBAI_CHECK_KIND(CorruptInput, x.is_number_integer(), path_, ": \"", key,
                     "\" should hold integers, got ", x.dump());
    out.push_back(x.get<int64_t>());
  }
  return out;
}

std::pair<int64_t, int64_t> HfConfig::get_size_pair(const std::string& key,
                                                    int64_t fallback) const {
  if (!has(key)) return {fallback, fallback};
  const auto& v = json_[key];
  if (v.is_array()) {
    LIBAI_CHECK_KIND(
        CorruptInput, v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer(),
        path_, ": \"", key, "\" should be an integer or [height, width], got ", v.dump());
    return {v[0].get<int64_t>(), v[1].get<int64_t>()};
  }
  const int64_t n = get_int(key, fallback);
  return {n, n};
}

std::vector<std::string> HfConfig::labels() const {
  if (!has("id2label")) return {};
  const auto& m = json_["id2label"];
  LIBAI_CHECK_KIND(CorruptInput, m.is_object(), path_, ": \"id2label\" should be an object");
  std::vector<std::string> out(m.size());
  for (auto it = m.begin(); it != m.end(); ++it) {
    size_t id = 0;
    try {
      id = std::stoul(it.key());
    } catch (...) {
      LIBAI_CHECK_KIND(CorruptInput, false, path_, ": id2label key \"", it.key(), "\" is not an id");
    }
    LIBAI_CHECK_KIND(CorruptInput, id < out.size() && it.value().is_string(), path_,
                     ": id2label entry \"", it.key(), "\" is out of range or not a string");
    out[id] = it.value().get<std::string>();
  }
  return out;
}

std::string HfConfig::architecture() const {
  if (!has("architectures")) return "";
  const auto& a = json_["architectures"];
  if (!a.is_array() || a.empty() || !a[0].is_string()) return "";
  return a[0].get<std::string>();
}

}  // namespace libai::models
