// The Llama family (Touvron et al. 2023) with its causal language-model head, from a Hugging
// Face folder: model_type llama (Llama 2 and 3), mistral and qwen2, which differ only in their
// config.json defaults and biases.
//
//   embed:  h = embed_tokens[ids]                                      // [batch, seq, hidden]
//   layers: h = h + attn(rms(h)); h = h + down(silu(gate(rms(h))) * up(rms(h)))
//           attn: grouped-query (kv_heads <= heads), q and k rotated by their positions (RoPE)
//   head:   logits = norm(h) lm_headᵀ                                  // or embed_tokensᵀ, tied
//
// What differs between the three: Qwen2 has q/k/v biases (and no output bias); Llama has
// biases on all four projections when attention_bias is set; Mistral none. The same class is
// the whole model, a part of it (Note [Model parts]) and, through its decode step, an inference
// pipeline stage (Note [Decoding through parts]).
#pragma once

#include <vector>

#include "models/family.h"
#include "models/layers/transformer_layer.h"
#include "models/model.h"

namespace libai::models {

// The rotary embedding's inverse frequencies as transformers computes them (rope_type default,
// linear, dynamic, llama3), from config.json's rope_parameters (transformers 5) or rope_theta
// and rope_scaling (earlier versions and most Hub checkpoints).
struct RopeConfig {
  enum class Type { default_, linear, dynamic, llama3 };
  Type type = Type::default_;
  double theta = 10000.0;
  int64_t dim = 0;  // rotated features per head (head_dim)
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_positions = 0;
  // dynamic: the sequence length beyond which the base grows (max_position_embeddings)
  int64_t max_positions = 0;

  // Unsupported naming the rope type for any other (yarn, longrope, ...).
  static RopeConfig from(const HfConfig& c, int64_t head_dim);
  // dim / 2 inverse frequencies for sequences of `seq_len` positions (only dynamic depends on
  // it: Hugging Face recomputes them when the longest position so far exceeds max_positions).
  std::vector<float> inverse_frequencies(int64_t seq_len) const;
  // cos and sin of positions [batch, n] (i64): [batch, 1, n, dim] each, f32 on the CPU.
  std::pair<Tensor, Tensor> cos_sin(const Tensor& positions) const;
};

// config.json of a llama, mistral or qwen2 model.
struct LlamaConfig {
  std::string model_type;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, inner = 0;
  int64_t max_positions = 0;
  Activation activation = Activation::silu;
  double eps = 1e-6;
  bool qkv_bias = false, out_bias = false, mlp_bias = false;
  bool tied = false;
  int64_t eos = -1, pad = -1;
  int64_t sliding_window = 0;  // > 0: attention is windowed beyond this many tokens
  double attention_dropout = 0.0;
  RopeConfig rope;

  explicit LlamaConfig(const HfConfig& c);
  TransformerLayerConfig layer() const;  // every layer's shape
};

// Checkpoint names -> ours: embed (model.embed_tokens), layers.{i} (model.layers.{i}),
// final_norm (model.norm), lm_head (untied only).
WeightMap llama_weight_map(const LlamaConfig& c);

// The whole model, or layers [part.first_layer, part.last_layer) (Note [Model parts]).
std::unique_ptr<Model> make_llama_lm(const HfConfig& config, const LayerContext& ctx,
                                     const std::optional<StageSpec>& part = std::nullopt);

// The ONNX graph of a loaded llama, mistral or qwen2 model (Family::export_onnx;
// models/llama/llama_onnx.cc).
struct GgufArchitecture;
// GGUF files of the family (models/llama/llama_gguf.cc).
const GgufArchitecture& llama_gguf();
void export_llama_onnx(Model& model, const onnx::ExportOptions& options, onnx::ExportGraphs& graphs);

// The family's declarations (one per model_type), listed in models/registry.cc.
const Family& llama_family();
const Family& mistral_family();
const Family& qwen2_family();

}  // namespace libai::models
