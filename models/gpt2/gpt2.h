// GPT-2 (Radford et al. 2019) with its language-model head, from a Hugging Face folder.
//
//   embed:  h = dropout(wte[ids] + wpe[positions])              // [batch, seq, hidden]
//   layers: h = h + attn(ln(h)) (causal); h = h + mlp(ln(h))    // pre-LN, gelu_new
//   head:   logits = ln_f(h) wteᵀ                               // tied to the embedding
//
// The same class is the whole model, a part of it (Note [Model parts]) and, through its decode
// step with KV caches, an inference pipeline stage (Note [Decoding through parts]).
#pragma once

#include "models/family.h"
#include "models/layers/transformer_layer.h"
#include "models/model.h"

namespace libai::models {

// config.json of a GPT-2 model.
struct Gpt2Config {
  int64_t vocab = 0, positions = 0, hidden = 0, layers = 0, heads = 0, inner = 0;
  Activation activation = Activation::gelu_tanh;
  double eps = 1e-5;
  int64_t eos = -1;
  // Hugging Face's dropout sites: after the embeddings, on attention probabilities, on each
  // sub-layer's output (attn c_proj, mlp c_proj). Active only while training.
  double embd_pdrop = 0.1, attn_pdrop = 0.1, resid_pdrop = 0.1;

  explicit Gpt2Config(const HfConfig& c);
  TransformerLayerConfig layer() const;  // every layer's shape
};

// Checkpoint names -> ours: embed (wte), positions (wpe), layers.{i}, final_norm (ln_f).
WeightMap gpt2_weight_map(const Gpt2Config& c);

// The whole model, or layers [part.first_layer, part.last_layer) with the embeddings and head
// as the part's place requires (Note [Model parts]).
std::unique_ptr<Model> make_gpt2_lm(const HfConfig& config, const LayerContext& ctx,
                                    const std::optional<StageSpec>& part = std::nullopt);

// The ONNX graph of a loaded GPT-2 (Family::export_onnx; models/gpt2/gpt2_onnx.cc).
struct GgufArchitecture;
// GGUF files of GPT-2 (models/gpt2/gpt2_gguf.cc).
const GgufArchitecture& gpt2_gguf();
void export_gpt2_onnx(Model& model, const onnx::ExportOptions& options, onnx::ExportGraphs& graphs);

// The family's declaration, listed in models/registry.cc.
const Family& gpt2_family();

}  // namespace libai::models
