// T5's and MT5's declarations (models/family.h): encoder layers, then decoder layers.
#include "models/family.h"
#include "models/stages/stage.h"
#include "models/t5/t5.h"

namespace libai::models {

namespace {

template <bool mt5>
std::unique_ptr<Model> make(const HfConfig& config, const LayerContext& ctx,
                            const std::optional<StageSpec>& part) {
  return make_t5_model(config, ctx, mt5, part);
}

template <bool mt5>
int num_layers(const HfConfig& config) {
  return t5_num_layers(config, mt5);
}

template <bool mt5>
GenerationInfo generation_info(const HfConfig& config) {
  const T5Config c(config, mt5);
  return {.vocab_size = c.vocab, .pad_id = c.pad, .decoder_start_id = c.decoder_start};
}

LayerShape layer_shape(const T5Config& c, bool decoder_layer) {
  return {.hidden = double(c.d_model),
          .inner = double(c.heads * c.d_kv),
          .heads = double(c.heads),
          .ff = double(c.d_ff),
          .gated = c.gated,
          .bias = false,
          .norm_bias = false,
          .cross = decoder_layer,
          .kv_cache = decoder_layer};
}

template <bool mt5>
std::vector<LayerCost> layer_costs(const HfConfig& config, double tokens, double context,
                                   double bytes) {
  const T5Config c(config, mt5);
  std::vector<LayerCost> costs(
      size_t(c.encoder_layers),
      transformer_layer_cost(layer_shape(c, false), tokens, context, bytes));
  costs.insert(costs.end(), size_t(c.decoder_layers),
               transformer_layer_cost(layer_shape(c, true), tokens, context, bytes));
  // Each stack's relative-position bias table with its first layer (stages holding later
  // layers of the stack load a copy: not counted), the encoder's final norm with its last.
  const double table = bytes * double(c.num_buckets * c.heads);
  costs[0].weight_bytes += table;
  costs[size_t(c.encoder_layers)].weight_bytes += table;
  costs[size_t(c.encoder_layers - 1)].weight_bytes += bytes * double(c.d_model);
  return costs;
}

template <bool mt5>
LayerCost embedding_cost(const HfConfig& config, double, double bytes) {
  const T5Config c(config, mt5);
  const double hidden = double(c.d_model);
  LayerCost cost;
  cost.weight_bytes = bytes * double(c.vocab) * hidden;  // `shared` (it embeds both stacks' tokens)
  cost.activation_bytes_per_token = bytes * hidden;
  cost.output_bytes_per_token = bytes * hidden;
  return cost;
}

template <bool mt5>
LayerCost head_cost(const HfConfig& config, double tokens, double bytes) {
  const T5Config c(config, mt5);
  const double h = double(c.d_model), vocab = double(c.vocab);
  LayerCost cost;
  cost.weight_bytes = bytes * (vocab * h + h);  // lm_head (or `shared` again), final norm
  cost.flops = 2 * tokens * h * vocab + 4 * tokens * h;
  cost.activation_bytes_per_token = bytes * (2 * h + vocab);
  cost.output_bytes_per_token = 4 * vocab;
  return cost;
}

// Per position of source and target together: encoder layers (4 h w + 2 or 3 h ff) + decoder
// layers (8 h w + 2 or 3 h ff) + V h; attention blocks: encoder layers + 2 x decoder layers.
template <bool mt5>
FlopsShape flops(const HfConfig& config) {
  const T5Config c(config, mt5);
  const double h = double(c.d_model), w = double(c.heads * c.d_kv);
  const double mlp = (c.gated ? 3 : 2) * h * double(c.d_ff);
  return {.matrix_parameters = double(c.encoder_layers) * (4 * h * w + mlp) +
                               double(c.decoder_layers) * (8 * h * w + mlp) + double(c.vocab) * h,
          .attention_blocks = c.encoder_layers + 2 * c.decoder_layers,
          .attention_width = c.heads * c.d_kv};
}

template <bool mt5>
Family declare(const char* model_type, const char* architecture) {
  return Family{
      .model_type = model_type,
      .heads = {{"", make<mt5>}, {architecture, make<mt5>}},
      .num_layers = num_layers<mt5>,
      .generates = GenerationKind::seq2seq,
      .generation = generation_info<mt5>,
      .costs = {.layers = layer_costs<mt5>,
                .embedding = embedding_cost<mt5>,
                .head = head_cost<mt5>},
      .flops = flops<mt5>,
      .make_stage = stages::make_part_stage,
      .export_onnx = export_t5_onnx,
  };
}

}  // namespace

const Family& t5_family() {
  static const Family family = declare<false>("t5", "T5ForConditionalGeneration");
  return family;
}

const Family& mt5_family() {
  static const Family family = declare<true>("mt5", "MT5ForConditionalGeneration");
  return family;
}

}  // namespace libai::models
