// Converting checkpoints: a Hugging Face folder (safetensors, sharded, or pytorch_model.bin)
// to this project's layout and back.
//
//   convert_model("hf/gpt2", "out/gpt2-libai", CheckpointLayout::libai);
//   convert_model("out/gpt2-libai", "out/gpt2-hf", CheckpointLayout::hf);
//
// The libai layout is a folder with config.json (unchanged), the tokenizer files, and one
// model.safetensors whose tensors carry this project's parameter names (q/k/v fused by head,
// Conv1D transposed) and whose metadata says {"format": "libai", "model_type": ...}. load_model
// reads both layouts. The hf layout writes the family's own names (model.safetensors), so
// transformers can load the result.
#pragma once

#include <filesystem>

#include "models/model.h"

namespace libai::models {

enum class CheckpointLayout { libai, hf };

// Loads `from` (either layout) and writes `to` in `layout`, copying config.json and the
// tokenizer / preprocessor files. `to` is created; an existing model.safetensors is replaced
// atomically.
void convert_model(const std::filesystem::path& from, const std::filesystem::path& to,
                   CheckpointLayout layout);

// Writes `model`'s parameters to `folder`/model.safetensors in `layout`.
void save_model_weights(Model& model, const std::filesystem::path& folder, CheckpointLayout layout);

// True when `source` is in the libai layout (its metadata says so).
bool is_libai_layout(const WeightSource& source);
// The identity map of a module's own parameter names (the libai layout).
WeightMap identity_map(Module& module);

}  // namespace libai::models
