// GPT-2's declaration (models/family.h): heads, layers, generation, costs, stages.
#include "models/family.h"
#include "models/gpt2/gpt2.h"
#include "models/stages/stage.h"

namespace libai::models {

namespace {

int num_layers(const HfConfig& config) { return int(Gpt2Config(config).layers); }

GenerationInfo generation_info(const HfConfig& config) {
  const Gpt2Config c(config);
  // Pads are masked out: any id in the vocabulary does (GPT-2 pads with eos, as its session).
  return {.vocab_size = c.vocab, .pad_id = c.eos < 0 ? 0 : c.eos, .max_positions = c.positions};
}

std::vector<LayerCost> layer_costs(const HfConfig& config, double tokens, double context,
                                   double bytes) {
  const Gpt2Config c(config);
  const LayerShape s{.hidden = double(c.hidden),
                     .inner = double(c.hidden),
                     .heads = double(c.heads),
                     .ff = double(c.inner),
                     .kv_cache = true};
  return std::vector<LayerCost>(size_t(c.layers),
                                transformer_layer_cost(s, tokens, context, bytes));
}

LayerCost embedding_cost(const HfConfig& config, double tokens, double bytes) {
  const Gpt2Config c(config);
  const double hidden = double(c.hidden);
  LayerCost cost;
  cost.weight_bytes = bytes * double(c.vocab + c.positions) * hidden;
  cost.flops = tokens * hidden;  // the sum of the two lookups
  cost.activation_bytes_per_token = bytes * hidden;
  cost.output_bytes_per_token = bytes * hidden;
  return cost;
}

LayerCost head_cost(const HfConfig& config, double tokens, double bytes) {
  const Gpt2Config c(config);
  const double h = double(c.hidden), vocab = double(c.vocab);
  LayerCost cost;
  cost.weight_bytes = bytes * (vocab * h + 2 * h);  // the tied table again, and ln_f
  cost.flops = 2 * tokens * h * vocab + 5 * tokens * h;
  cost.activation_bytes_per_token = bytes * (2 * h + vocab);
  cost.output_bytes_per_token = 4 * vocab;  // f32 logits
  return cost;
}

// l x (4 h^2 + 2 h ff) + V h (the tied LM head).
FlopsShape flops(const HfConfig& c) {
  const double h = double(c.get_int("n_embd", 768)), l = double(c.get_int("n_layer", 12));
  const double ff = double(c.has("n_inner") ? c.get_int("n_inner", 0) : 4 * int64_t(h));
  const double vocab = double(c.require_int("vocab_size"));
  return {.matrix_parameters = l * (4 * h * h + 2 * h * ff) + vocab * h,
          .attention_blocks = int64_t(l),
          .attention_width = int64_t(h)};
}

}  // namespace

const Family& gpt2_family() {
  static const Family family{
      .model_type = "gpt2",
      .heads = {{"", make_gpt2_lm}, {"GPT2LMHeadModel", make_gpt2_lm}},
      .num_layers = num_layers,
      .generates = GenerationKind::causal,
      .generation = generation_info,
      .costs = {.layers = layer_costs, .embedding = embedding_cost, .head = head_cost},
      .flops = flops,
      .make_stage = stages::make_part_stage,
      .export_onnx = export_gpt2_onnx,
      .gguf = &gpt2_gguf(),
      .scaled_residual_init = true,
  };
  return family;
}

}  // namespace libai::models
