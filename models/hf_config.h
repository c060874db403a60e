// Reading a Hugging Face config.json with errors that name the file, the key and the value.
//
//   HfConfig c = HfConfig::load("gpt2/");            // gpt2/config.json
//   int64_t hidden = c.get_int("n_embd", 768);       // the default when the key is absent
//   std::string act = c.get_string("activation_function", "gelu_new");
//   c.require_int("vocab_size");                     // CorruptInput when absent
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace libai::models {

class HfConfig {
 public:
  static HfConfig load(const std::filesystem::path& folder_or_file);
  static HfConfig from_json(nlohmann::json json, std::string path = "<config>");

  bool has(const std::string& key) const;  // present and not null
  int64_t get_int(const std::string& key, int64_t fallback) const;
  int64_t require_int(const std::string& key) const;
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // An int or a list of ints (eos_token_id may be either); empty when absent.
  std::vector<int64_t> get_int_list(const std::string& key) const;
  // An int n (as {n, n}) or a [height, width] pair (image_size, patch_size); fallback twice
  // when absent.
  std::pair<int64_t, int64_t> get_size_pair(const std::string& key, int64_t fallback) const;
  // id2label as labels ordered by id, empty when absent.
  std::vector<std::string> labels() const;

  std::string model_type() const { return get_string("model_type", ""); }
  std::string architecture() const;  // architectures[0], or ""
  const nlohmann::json& json() const { return json_; }
  const std::string& path() const { return path_; }

 private:
  nlohmann::json json_;
  std::string path_;
};

}  // namespace libai::models
