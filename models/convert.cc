#include "models/convert.h"

#include "models/layers/linear.h"
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
  if (layout == CheckpointLayout::libai) {
    for (auto& [name, tensor] : model.named_parameters()) tensors.emplace_back(name, tensor->detach());
    metadata["model_type"] = model.config().model_type();
  } else {
    tensors = export_parameters(model, model.weight_map());
  }
  checkpoint::save_safetensors((folder / "model.safetensors").string(), tensors, metadata);
}

void convert_model(const fs::path& from, const fs::path& to, CheckpointLayout layout) {
  LIBAI_CHECK(fs::weakly_canonical(from) != fs::weakly_canonical(to),
              "convert: the destination ", to.string(), " is the source folder");
  auto model = load_model(from);
  fs::create_directories(to);
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
