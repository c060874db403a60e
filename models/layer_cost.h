// Planning estimates of one transformer layer from its shape, for the families' cost models
// (models/family.h). The numbers are those models/stages/stage.h documents: flops, weight
// bytes, KV cache, activations kept for backward and the message passed on, per token.
#pragma once

namespace libai::models {

struct LayerCost {
  double flops = 0, weight_bytes = 0, kv_bytes_per_token = 0, activation_bytes_per_token = 0;
  double output_bytes_per_token = 0;
};

// The shape of one transformer layer, what its cost depends on.
struct LayerShape {
  double hidden = 0, inner = 0, heads = 0, ff = 0;  // inner: heads x head_dim
  double kv_inner = 0;  // self-attention's k and v width (kv_heads x head_dim); 0: inner
  bool gated = false, bias = true, norm_bias = true;
  bool cross = false;     // a decoder layer with cross-attention (T5)
  bool kv_cache = false;  // keeps its self-attention keys and values while decoding
};

// One layer over `tokens` tokens that attend to `context` keys each, `bytes` per element.
LayerCost transformer_layer_cost(const LayerShape& shape, double tokens, double context,
                                 double bytes);

}  // namespace libai::models
