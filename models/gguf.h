// GGUF files as models (Note [GGUF models] in models/gguf.cc): a .gguf file stands wherever a
// Hugging Face folder does. HfConfig::load makes its config.json from the metadata,
// WeightSource::open shows its tensors under the checkpoint names the family's WeightMap
// reads, and load_tokenizer builds the tokenizer from the metadata's vocabulary.
//
//   HfConfig c = HfConfig::load("tiny-llama-q4_0.gguf");     // model_type "llama", ...
//   auto model = load_model("tiny-llama-q4_0.gguf", {.pack_weights = true,
//                                                     .quantize = {Quantization::q4}});
//
// A family reads GGUF files when its declaration has a GgufArchitecture (Family::gguf): the
// general.architecture names it takes, its config from the metadata, and where each of its
// checkpoint tensors comes from.
#pragma once

#include <filesystem>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/gguf.h"

namespace libai::models {

class HfConfig;

// How a checkpoint tensor is made from a GGUF tensor.
struct GgufTensor {
  enum class Op {
    copy,
    transpose,  // 2-D: the file's [out, in] as GPT-2's Conv1D [in, out]
    unrope,     // rows of `heads` heads, each interleaved by llama.cpp's converter for its
                // rotary kernel: back to Hugging Face's halves (Note [GGUF models])
  };
  std::string source;  // the GGUF tensor
  Op op = Op::copy;
  int64_t heads = 0;   // unrope
};
using GgufTensors = std::vector<std::pair<std::string, GgufTensor>>;

struct GgufArchitecture {
  std::vector<std::string> architectures;  // general.architecture values
  // The config.json this file amounts to (model_type, sizes, special ids); Unsupported naming
  // the key for what the family does not implement.
  nlohmann::json (*config)(const checkpoint::GgufFile& file, const std::string& architecture);
  // Checkpoint name -> its GGUF tensor, for the tensors the file holds.
  GgufTensors (*tensors)(const checkpoint::GgufFile& file, const HfConfig& config);
};

// A regular file starting with "GGUF".
bool is_gguf(const std::filesystem::path& path);
// The config.json of a GGUF file; Unsupported naming the architecture when no family reads it.
HfConfig gguf_config(const std::filesystem::path& file);

// The tensors of a GGUF file under their checkpoint names (those of GgufArchitecture::tensors),
// then the file's own names of the tensors no rule takes (reported as unused).
class GgufWeights {
 public:
  static GgufWeights open(const std::filesystem::path& file);
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // f32 (F32: a view of the file)
  const checkpoint::GgufFile& file() const { return file_; }
  // The file's tensor types: "Q4_0 x 14, F32 x 5" (for logs and errors).
  std::string type_summary() const;

 private:
  GgufWeights(checkpoint::GgufFile file, GgufTensors rules);
  checkpoint::GgufFile file_;
  GgufTensors rules_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, size_t> rule_of_;  // checkpoint name -> rules_ index
  std::unordered_set<std::string> listed_;             // names_

};

// Helpers for the families' GgufArchitecture functions: `arch.key` as an int or real, with
// CorruptInput naming the key when absent (no fallback) or mistyped.
int64_t gguf_int(const checkpoint::GgufFile& f, const std::string& arch, const std::string& key);
int64_t gguf_int(const checkpoint::GgufFile& f, const std::string& arch, const std::string& key,
                 int64_t fallback);
double gguf_real(const checkpoint::GgufFile& f, const std::string& arch, const std::string& key,
                 double fallback);
// The special token ids of the tokenizer metadata (bos_token_id, eos_token_id, pad_token_id)
// into config; vocab_size from the token embedding's rows.
void gguf_common_config(const checkpoint::GgufFile& f, const std::string& embedding,
                        nlohmann::json& config);

}  // namespace libai::models
