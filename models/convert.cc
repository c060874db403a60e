#include "models/convert.h"

#include <fstream>
#include <map>
#include <set>

#include "models/gguf.h"
#include "models/layers/linear.h"
#include "models/tokenizers/tokenizer.h"
#include "runtime/checkpoint/safetensors.h"

namespace libai::models {

namespace fs = std::filesystem;

bool is_libai_layout(const WeightSource& source) {
  auto it = source.metadata().find("format");
  return it != source.metadata().end() && it->second == "libai";
}

WeightMap identity_map(Module& module) {
  WeightMap map;
  for (auto& [name, tensor] : module.named_parameters()) map.add(name, name);
  return map;
}

void save_model_weights(Model& model, const fs::path& folder, CheckpointLayout layout) {
  LIBAI_CHECK(!has_released_weights(model), "save_model_weights: the model's quantized layers "
              "released their f32 weights (loaded with LoadOptions::quantize): load it with "
              "keep_f32_weights to save it");
  fs::create_directories(folder);
  checkpoint::NamedTensors tensors;
  checkpoint::Metadata metadata{{"format", layout == CheckpointLayout::libai ? "libai" : "pt"}};
  // The quantized copies by their weight's name (Note [Quantized checkpoints]).
  std::map<std::string, const ops::PackedWeight*> quantized;
  for (auto& [name, m] : model.named_modules()) {
    const ops::PackedWeight* w = nullptr;
    if (auto* linear = dynamic_cast<Linear*>(m)) w = &linear->packed_weight();
    if (auto* table = dynamic_cast<Embedding*>(m)) w = &table->packed();
    if (w && w->quantized()) quantized[weight_name(name)] = w;
  }
  std::set<std::string> lookup_tables;
  for (auto& [name, m] : model.named_modules())
    if (auto* table = dynamic_cast<Embedding*>(m); table && !table->output_only())
      lookup_tables.insert(weight_name(name));
  LIBAI_CHECK(quantized.empty() || layout == CheckpointLayout::libai,
              "save_model_weights: quantized layers are written in the libai layout only");
  if (layout == CheckpointLayout::libai) {
    std::string kind;
    for (auto& [name, tensor] : model.named_parameters()) {
      auto it = quantized.find(name);
      if (it == quantized.end()) {
        tensors.emplace_back(name, tensor->detach());
        continue;
      }
      const ops::QuantizedTensors q = ops::quantized_tensors(*it->second);
      kind = ops::quantization_name(it->second->quantization());
      tensors.emplace_back(name + ".q", q.q);
      tensors.emplace_back(name + ".scale", q.scale);
      if (q.min.defined()) tensors.emplace_back(name + ".min", q.min);
      // A table that is also looked up keeps its exact values; a Linear's and an untied head's
      // are the dequantised ones.
      if (lookup_tables.count(name)) tensors.emplace_back(name, tensor->detach());
    }
    metadata["model_type"] = model.config().model_type();
    if (!kind.empty()) metadata["quantization"] = kind;
  } else {
    tensors = export_parameters(model, model.weight_map());
  }
  checkpoint::save_safetensors((folder / "model.safetensors").string(), tensors, metadata);
}

void convert_model(const fs::path& from, const fs::path& to, CheckpointLayout layout,
                   const ops::QuantSpec& quantize, const std::vector<std::string>& keep) {
  LIBAI_CHECK(fs::weakly_canonical(from) != fs::weakly_canonical(to),
              "convert: the destination ", to.string(), " is the source folder");
  const bool quantized = quantize.kind != ops::Quantization::none;
  LIBAI_CHECK(!quantized || layout == CheckpointLayout::libai, "convert: --quantize ",
              ops::quantization_name(quantize), " writes the libai layout only (transformers "
              "cannot read our quantized tensors): leave --format hf out");
  LIBAI_CHECK(quantized || keep.empty(), "convert: --quantize-keep without --quantize");
  auto model = load_model(from, {.pack_weights = quantized,
                                 .quantize = quantize,
                                 .quantize_keep = keep,
                                 .keep_f32_weights = true});
  fs::create_directories(to);
  if (is_gguf(from)) {
    std::ofstream(to / "config.json") << model->config().json().dump(2) << "\n";
    tokenizers::write_gguf_tokenizer(from, to);
  }
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "special_tokens_map.json", "vocab.txt", "vocab.json", "merges.txt",
                           "spiece.model", "preprocessor_config.json", "modules.json",
                           "sentence_bert_config.json"})
    if (fs::exists(from / name))
      fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
  for (const char* sub : {"1_Pooling", "2_Normalize"})
    if (fs::is_directory(from / sub))
      fs::copy(from / sub, to / sub, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  // Another layout's weights must not shadow the new file (load order prefers safetensors).
  for (const char* stale : {"model.safetensors.index.json", "pytorch_model.bin"})
    if (fs::exists(to / stale)) fs::remove(to / stale);
  save_model_weights(*model, to, layout);
}

}  // namespace libai::models
