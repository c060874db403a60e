// One transformer layer: self-attention, optional cross-attention (encoder-decoder models),
// and the MLP, each with a residual connection, normalised before (pre-LN: GPT-2, T5, ViT)
// or after (post-LN: BERT, RoBERTa).
//
// While training with TrainingMode::activation_checkpoint (and recording, and no cache), the
// layer keeps only its input: autograd::checkpoint re-runs it in backward under the
// TrainingMode of the forward, so dropout draws the same masks (Note [Checkpoint contract]).
//
//   TransformerLayerConfig cfg;
//   cfg.attention = {.hidden = 768, .heads = 12};
//   cfg.mlp = {.hidden = 768, .intermediate = 3072, .activation = Activation::gelu_tanh};
//   cfg.pre_norm = true;
//   TransformerLayer layer(ctx, cfg);
//   Tensor h = layer.forward(x, {.self = {.causal = true}}, &cache);   // [batch, seq, 768]
#pragma once

#include "models/layers/attention.h"
#include "models/layers/mlp.h"

namespace libai::models {

struct TransformerLayerConfig {
  AttentionConfig attention;
  MlpConfig mlp;
  bool cross_attention = false;
  bool pre_norm = true;
  ops::NormKind norm = ops::NormKind::layer;
  double norm_eps = 1e-5;
  bool norm_bias = true;
  double dropout = 0.0;  // on each sub-layer's output before its residual add, while training
};

struct LayerInputs {
  AttentionInputs self;   // masks and bias of the self-attention
  AttentionInputs cross;  // memory, its padding mask and bias (cross-attention layers)
};

// The caches of one layer while decoding.
struct LayerCache {
  KVCache self;
  KVCache cross;
  void select_rows(const Tensor& rows) {
    self.select_rows(rows);
    cross.select_rows(rows);
  }
};

class TransformerLayer : public Module {
 public:
  TransformerLayer(const LayerContext& ctx, const TransformerLayerConfig& config);
  Tensor forward(const Tensor& x, const LayerInputs& in, LayerCache* cache = nullptr) const;

 private:
  Tensor compute(const Tensor& x, const LayerInputs& in, LayerCache* cache) const;
  // forward() once the parameters are there (Note [Parameters fetched around a layer]).
  Tensor forward_fetched(const Tensor& x, const LayerInputs& in, LayerCache* cache) const;

  TransformerLayerConfig config_;
  Norm* attention_norm_ = nullptr;
  Attention* attention_ = nullptr;
  Norm* cross_attention_norm_ = nullptr;
  Attention* cross_attention_ = nullptr;
  Norm* mlp_norm_ = nullptr;
  Mlp* mlp_ = nullptr;
  Dropout* attention_dropout_ = nullptr;
  Dropout* cross_attention_dropout_ = nullptr;
  Dropout* mlp_dropout_ = nullptr;
};

}  // namespace libai::models
