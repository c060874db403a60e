// The Llama family's declarations (models/family.h): llama, mistral and qwen2 share the model,
// its layers, generation and costs; each model_type is one Family.
#include "models/family.h"
#include "models/llama/llama.h"
#include "models/stages/stage.h"

namespace libai::models {

namespace {

int num_layers(const HfConfig& config) { return int(LlamaConfig(config).layers); }

GenerationInfo generation_info(const HfConfig& config) {
  const LlamaConfig c(config);
  // Rotary positions have no table: sequences are unbounded (max_positions 0), as in
  // transformers' generate.
  return {.vocab_size = c.vocab, .pad_id = c.pad >= 0 ? c.pad : c.eos >= 0 ? c.eos : 0};
}

std::vector<LayerCost> layer_costs(const HfConfig& config, double tokens, double context,
                                   double bytes) {
  const LlamaConfig c(config);
  const LayerShape s{.hidden = double(c.hidden),
                     .inner = double(c.heads * c.head_dim),
                     .heads = double(c.heads),
                     .ff = double(c.inner),
                     .kv_inner = double(c.kv_heads * c.head_dim),
                     .gated = true,
                     .bias = c.qkv_bias,
                     .norm_bias = false,
                     .kv_cache = true};
  return std::vector<LayerCost>(size_t(c.layers),
                                transformer_layer_cost(s, tokens, context, bytes));
}

LayerCost embedding_cost(const HfConfig& config, double tokens, double bytes) {
  const LlamaConfig c(config);
  const double hidden = double(c.hidden);
  LayerCost cost;
  cost.weight_bytes = bytes * double(c.vocab) * hidden;
  cost.flops = tokens * hidden;  // the lookup's copy
  cost.activation_bytes_per_token = bytes * hidden;
  cost.output_bytes_per_token = bytes * hidden;
  return cost;
}

LayerCost head_cost(const HfConfig& config, double tokens, double bytes) {
  const LlamaConfig c(config);
  const double h = double(c.hidden), vocab = double(c.vocab);
  LayerCost cost;
  cost.weight_bytes = bytes * (vocab * h + h);  // the head (or the tied table again), the norm
  cost.flops = 2 * tokens * h * vocab + 4 * tokens * h;
  cost.activation_bytes_per_token = bytes * (2 * h + vocab);
  cost.output_bytes_per_token = 4 * vocab;  // f32 logits
  return cost;
}

// l x (h (heads + 2 kv_heads) d + heads d h + 3 h ff) + V h (the head).
FlopsShape flops(const HfConfig& config) {
  const LlamaConfig c(config);
  const double h = double(c.hidden), d = double(c.head_dim), ff = double(c.inner);
  const double attention = h * double(c.heads + 2 * c.kv_heads) * d + double(c.heads) * d * h;
  return {.matrix_parameters = double(c.layers) * (attention + 3 * h * ff) + double(c.vocab) * h,
          .attention_blocks = c.layers,
          .attention_width = c.heads * c.head_dim};
}

Family declare(const std::string& type, const std::string& architecture,
               const GgufArchitecture* gguf = nullptr) {
  return Family{
      .model_type = type,
      .heads = {{"", make_llama_lm}, {architecture, make_llama_lm}},
      .num_layers = num_layers,
      .generates = GenerationKind::causal,
      .generation = generation_info,
      .costs = {.layers = layer_costs, .embedding = embedding_cost, .head = head_cost},
      .flops = flops,
      .make_stage = stages::make_part_stage,
      .export_onnx = export_llama_onnx,
      .gguf = gguf,
  };
}

}  // namespace

const Family& llama_family() {
  static const Family family = declare("llama", "LlamaForCausalLM", &llama_gguf());
  return family;
}

const Family& mistral_family() {
  static const Family family = declare("mistral", "MistralForCausalLM");
  return family;
}

const Family& qwen2_family() {
  static const Family family = declare("qwen2", "Qwen2ForCausalLM");
  return family;
}

}  // namespace libai::models
