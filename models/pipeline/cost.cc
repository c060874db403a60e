// Planning estimates of layers, embeddings and heads from config.json alone (stage.h).
#include "models/bert/bert.h"
#include "models/gpt2/gpt2.h"
#include "models/pipeline/stage.h"

namespace libai::models::pipeline {

namespace {

// The shape of one transformer layer, what its cost depends on.
struct LayerShape {
  double hidden = 0, inner = 0, heads = 0, ff = 0;  // inner: heads x head_dim
  bool gated = false, bias = true, norm_bias = true;
  bool cross = false;     // a decoder layer with cross-attention (T5)
  bool kv_cache = false;  // keeps its self-attention keys and values while decoding
};

LayerCost layer_cost(const LayerShape& s, double tokens, double context, double bytes) {
  const double h = s.hidden, inner = s.inner, ff = s.ff;
  const double attention_params = 4 * h * inner + (s.bias ? 3 * inner + h : 0);  // q, k, v, out
  const double mlp_matrices = (s.gated ? 3 : 2) * h * ff;
  const double mlp_params = mlp_matrices + (s.bias ? ff + h : 0);
  const double norms = (s.cross ? 3 : 2) * h * (s.norm_bias ? 2 : 1);
  LayerCost c;
  c.weight_bytes = bytes * ((s.cross ? 2 : 1) * attention_params + mlp_params + norms);
  // Projections, then q kᵀ and p v over `context` keys.
  c.flops = 2 * tokens * (4 * h * inner + mlp_matrices) + 4 * tokens * context * inner;
  // Per token: norm in and out, q/k/v, scores and probabilities, the heads' output; norm in
  // and out, the MLP's hidden values before and after the activation (and the gate).
  double kept = 2 * h + 4 * inner + 2 * s.heads * context + 2 * h + (s.gated ? 3 : 2) * ff;
  if (s.cross) {  // q and o per token, k and v over as many memory tokens as `context`
    c.flops +=
        2 * tokens * 2 * h * inner + 2 * context * 2 * h * inner + 4 * tokens * context * inner;
    kept += 2 * h + 2 * inner + 2 * s.heads * context;
  }
  c.kv_bytes_per_token = s.kv_cache ? bytes * 2 * inner : 0;
  c.activation_bytes_per_token = bytes * kept;
  c.output_bytes_per_token = bytes * h;
  return c;
}

// The parts of T5 / MT5's config.json that costs need (defaults of models/t5/t5.cc).
struct T5Shape {
  int64_t vocab = 0, d_model = 0, d_kv = 0, d_ff = 0, heads = 0, encoder = 0, decoder = 0;
  int64_t num_buckets = 0;
  bool gated = false;
  explicit T5Shape(const HfConfig& c) {
    const bool mt5 = c.model_type() == "mt5";
    vocab = c.require_int("vocab_size");
    d_model = c.get_int("d_model", 512);
    d_kv = c.get_int("d_kv", 64);
    d_ff = c.get_int("d_ff", mt5 ? 1024 : 2048);
    heads = c.get_int("num_heads", mt5 ? 6 : 8);
    encoder = c.get_int("num_layers", mt5 ? 8 : 6);
    decoder = c.get_int("num_decoder_layers", encoder);
    num_buckets = c.get_int("relative_attention_num_buckets", 32);
    gated = c.get_string("feed_forward_proj", mt5 ? "gated-gelu" : "relu").rfind("gated-", 0) == 0;
  }
  LayerShape layer(bool decoder_layer) const {
    return {.hidden = double(d_model),
            .inner = double(heads * d_kv),
            .heads = double(heads),
            .ff = double(d_ff),
            .gated = gated,
            .bias = false,
            .norm_bias = false,
            .cross = decoder_layer,
            .kv_cache = decoder_layer};
  }
};

bool is_t5(const std::string& type) { return type == "t5" || type == "mt5"; }
bool is_bert(const std::string& type) { return type == "bert" || type == "roberta"; }

[[noreturn]] void unsupported(const HfConfig& config) {
  throw Error(ErrorKind::unsupported,
              str_cat(config.path(), ": no cost model for model_type \"", config.model_type(),
                      "\" (gpt2, bert, roberta, t5, mt5)"));
}

}  // namespace

std::vector<LayerCost> layer_costs(const HfConfig& config, int64_t tokens, DType dtype,
                                   int64_t context) {
  LIBAI_CHECK(tokens > 0 && context >= 0, config.path(),
              ": layer_costs needs tokens > 0 and context >= 0, got ", tokens, " and ", context);
  const std::string type = config.model_type();
  const double t = double(tokens), k = double(context > 0 ? context : tokens);
  const double bytes = double(dtype_size(dtype));
  std::vector<LayerCost> costs;
  if (type == "gpt2") {
    const Gpt2Config c(config);
    const LayerShape s{.hidden = double(c.hidden),
                       .inner = double(c.hidden),
                       .heads = double(c.heads),
                       .ff = double(c.inner),
                       .kv_cache = true};
    costs.assign(size_t(c.layers), layer_cost(s, t, k, bytes));
  } else if (is_bert(type)) {
    const BertConfig c(config, type == "roberta");
    const LayerShape s{.hidden = double(c.hidden),
                       .inner = double(c.hidden),
                       .heads = double(c.heads),
                       .ff = double(c.intermediate)};
    costs.assign(size_t(c.layers), layer_cost(s, t, k, bytes));
  } else if (is_t5(type)) {
    const T5Shape c(config);
    costs.assign(size_t(c.encoder), layer_cost(c.layer(false), t, k, bytes));
    costs.insert(costs.end(), size_t(c.decoder), layer_cost(c.layer(true), t, k, bytes));
    // Each stack's relative-position bias table with its first layer (stages holding later
    // layers of the stack load a copy: not counted), the encoder's final norm with its last.
    const double table = bytes * double(c.num_buckets * c.heads);
    costs[0].weight_bytes += table;
    costs[size_t(c.encoder)].weight_bytes += table;
    costs[size_t(c.encoder - 1)].weight_bytes += bytes * double(c.d_model);
  } else {
    unsupported(config);
  }
  return costs;
}

LayerCost embedding_cost(const HfConfig& config, int64_t tokens, DType dtype) {
  const std::string type = config.model_type();
  const double t = double(tokens), bytes = double(dtype_size(dtype));
  LayerCost cost;
  double hidden = 0;
  if (type == "gpt2") {
    const Gpt2Config c(config);
    hidden = double(c.hidden);
    cost.weight_bytes = bytes * double(c.vocab + c.positions) * hidden;
    cost.flops = t * hidden;  // the sum of the two lookups
  } else if (is_bert(type)) {
    const BertConfig c(config, type == "roberta");
    hidden = double(c.hidden);
    cost.weight_bytes = bytes * (double(c.vocab + c.positions + c.type_vocab) + 2) * hidden;
    cost.flops = 7 * t * hidden;  // three lookups summed, then a layer norm
  } else if (is_t5(type)) {
    const T5Shape c(config);
    hidden = double(c.d_model);
    // The shared table (it embeds the decoder's tokens too).
    cost.weight_bytes = bytes * double(c.vocab) * hidden;
  } else {
    unsupported(config);
  }
  cost.activation_bytes_per_token = bytes * hidden;
  cost.output_bytes_per_token = bytes * hidden;
  return cost;
}

LayerCost head_cost(const HfConfig& config, int64_t tokens, DType dtype) {
  const std::string type = config.model_type();
  const double t = double(tokens), bytes = double(dtype_size(dtype));
  LayerCost cost;
  if (type == "gpt2") {
    const Gpt2Config c(config);
    const double h = double(c.hidden), vocab = double(c.vocab);
    cost.weight_bytes = bytes * (vocab * h + 2 * h);  // the tied table again, and ln_f
    cost.flops = 2 * t * h * vocab + 5 * t * h;
    cost.activation_bytes_per_token = bytes * (2 * h + vocab);
    cost.output_bytes_per_token = 4 * vocab;  // f32 logits
  } else if (is_bert(type)) {
    // The encoder's stages end with the last layer: no norm, no head.
    cost.output_bytes_per_token = bytes * double(BertConfig(config, type == "roberta").hidden);
  } else if (is_t5(type)) {
    const T5Shape c(config);
    const double h = double(c.d_model), vocab = double(c.vocab);
    cost.weight_bytes = bytes * (vocab * h + h);  // lm_head (or `shared` again), final norm
    cost.flops = 2 * t * h * vocab + 4 * t * h;
    cost.activation_bytes_per_token = bytes * (2 * h + vocab);
    cost.output_bytes_per_token = 4 * vocab;
  } else {
    unsupported(config);
  }
  return cost;
}

}  // namespace libai::models::pipeline
