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
// `quantize` (kind other than none; libai layout only) writes a quantized checkpoint: the
// layers quantized as load_model's LoadOptions::quantize would quantize them (but `keep`)
// are stored as their quantized values (Note [Quantized checkpoints] in ops/packed_linear.h),
// metadata "quantization" names the kind, and load_model installs them without quantizing
// again. `from` may be a GGUF file: config.json and the tokenizer are written from its
// metadata.
void convert_model(const std::filesystem::path& from, const std::filesystem::path& to,
                   CheckpointLayout layout, const ops::QuantSpec& quantize = {},
                   const std::vector<std::string>& keep = {});

// Writes `model`'s parameters to `folder`/model.safetensors in `layout`. libai: the layers
// packed quantized (quantize with keep_f32_weights) are written as their quantized values.
void save_model_weights(Model& model, const std::filesystem::path& folder, CheckpointLayout layout);

// True when `source` is in the libai layout (its metadata says so).
bool is_libai_layout(const WeightSource& source);
// The identity map of a module's own parameter names (the libai layout).
WeightMap identity_map(Module& module);

}  // namespace libai::models
