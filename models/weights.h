// Checkpoint tensors mapped onto a model's parameters.
//
//   auto source = WeightSource::open("gpt2/");                 // model.safetensors, a sharded
//                                                               // index, or pytorch_model.bin
//   WeightMap map;
//   map.source_prefixes = {"", "transformer."};                // LMHead checkpoints add one
//   map.add("embed.weight", "wte.weight");
//   map.add_transposed("layers.0.mlp.up.weight", "h.0.mlp.c_fc.weight");      // Conv1D
//   map.add_heads("layers.0.attention.qkv.weight", {"h.0.attn.c_attn.weight"}, 3, heads, true);
//   map.ignore("attn.masked_bias");                             // buffers, not parameters
//   LoadReport r = load_parameters(model, source, map);        // throws on missing/mismatched
//
// A rule makes one parameter from one or more checkpoint tensors: copied, transposed, or
// reordered by head (Note [Fused q/k/v by head] in layers/attention.h). Every rule can be
// inverted, so the same map writes a model back out in the checkpoint's own names
// (export_parameters). Dtypes are converted to the parameter's (bf16 on disk into an f32
// model, say).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/module.h"
#include "ops/packed_linear.h"
#include "runtime/checkpoint/safetensors.h"

namespace libai::models {

enum class WeightFormat { any, safetensors, torch };

class WeightSource {
 public:
  // A folder holds model.safetensors, model.safetensors.index.json or pytorch_model.bin
  // (tried in that order unless `format` picks one); a file is .safetensors or a PyTorch zip
  // (.bin, .pt, .pth). NotFound names the folder and the files looked for.
  static WeightSource open(const std::filesystem::path& path,
                           WeightFormat format = WeightFormat::any);
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  Tensor get(const std::string& name) const;
  const std::string& path() const;  // what was opened, for messages
  // safetensors __metadata__ (or a sharded index's "metadata"); empty for PyTorch files.
  const checkpoint::Metadata& metadata() const;
  // A quantized checkpoint (convert --quantize; Note [Quantized checkpoints] in
  // ops/packed_linear.h): its metadata's "quantization" (kind none otherwise). Its quantized
  // weights W are listed and read as their dequantised f32 values (W.q, W.scale, W.min are
  // not listed); quantized(W) gives the stored values, nullopt for a weight stored as is.
  const ops::QuantSpec& quantization() const;
  std::optional<ops::QuantizedTensors> quantized(const std::string& name) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

struct WeightRule {
  std::string parameter;
  std::vector<std::string> sources;
  bool transpose = false;  // each source is [in, out] (GPT-2's Conv1D)
  int64_t heads = 0;       // > 0: rows ordered [part][head][d] -> [head][part][d]
  int64_t parts = 1;
  // > 0: sources q [heads * d], k and v [kv_heads * d] (rows) -> [kv_head][g q | k | v][d]
  // with g = heads / kv_heads (grouped-query attention; `heads` holds the query heads).
  int64_t kv_heads = 0;
};

struct WeightMap {
  std::vector<std::string> source_prefixes = {""};  // tried in order for every source name
  std::vector<WeightRule> rules;
  std::vector<std::string> ignored;  // checkpoint names ending with one of these are not reported

  void add(std::string parameter, std::string source);
  void add_transposed(std::string parameter, std::string source);
  // `sources` concatenated along dim 0 (after transposing each, if asked) hold `parts` blocks
  // of heads x d rows; the parameter takes them by head.
  void add_heads(std::string parameter, std::vector<std::string> sources, int64_t parts,
                 int64_t heads, bool transpose = false);
  // Separate q, k and v projections (rows: heads, kv_heads and kv_heads blocks of d) fused
  // by key/value group (Note [Fused q/k/v by head] in layers/attention.h).
  void add_grouped_qkv(std::string parameter, std::vector<std::string> qkv, int64_t heads,
                       int64_t kv_heads);
  void ignore(std::string suffix);
};

struct LoadReport {
  int64_t loaded = 0;
  std::vector<std::string> unexpected;  // checkpoint tensors no rule used
};

// Fills every parameter of `module` from `source` through `map`. Missing tensors, parameters
// without a rule, and shape mismatches are collected and thrown together as one CorruptInput
// error naming each tensor with its shape and the checkpoint's path. Unexpected checkpoint
// tensors are returned (and logged), as Hugging Face does.
// `loaded`, if given, is called with each parameter once its values are in (Note [Streaming
// packed loads] in model.cc packs a layer there).
LoadReport load_parameters(Module& module, const WeightSource& source, const WeightMap& map,
                           const std::function<void(const ParameterInfo&)>& loaded = {});

// The module's parameters under the checkpoint's names (the inverse of every rule, with the
// first source prefix), contiguous, ready for save_safetensors.
checkpoint::NamedTensors export_parameters(Module& module, const WeightMap& map);

}  // namespace libai::models
