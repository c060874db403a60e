#include "models/layers/transformer_layer.h"

#include "ops/ops.h"

namespace libai::models {

TransformerLayer::TransformerLayer(const LayerContext& ctx, const TransformerLayerConfig& config)
    : config_(config) {
  const int64_t h = config.attention.hidden;
  auto norm = [&] {
    return std::make_unique<Norm>(ctx, config.norm, h, config.norm_eps, config.norm_bias);
  };
  AttentionConfig self = config.attention;
  self.cross = false;
  attention_ = &add_module("attention", std::make_unique<Attention>(ctx, self));
  attention_norm_ = &add_module("attention_norm", norm());
  if (config.cross_attention) {
    AttentionConfig cross = config.attention;
    cross.cross = true;
    cross_attention_ = &add_module("cross_attention", std::make_unique<Attention>(ctx, cross));
    cross_attention_norm_ = &add_module("cross_attention_norm", norm());
  }
  mlp_ = &add_module("mlp", std::make_unique<Mlp>(ctx, config.mlp));
  mlp_norm_ = &add_module("mlp_norm", norm());
}

Tensor TransformerLayer::forward(const Tensor& x, const LayerInputs& in, LayerCache* cache) const {
  KVCache* self_cache = cache ? &cache->self : nullptr;
  KVCache* cross_cache = cache ? &cache->cross : nullptr;
  Tensor h = x;  // [batch, seq, hidden]
  if (config_.pre_norm) {
    h = h + attention_->forward(attention_norm_->forward(h), in.self, self_cache);
    if (cross_attention_)
      h = h + cross_attention_->forward(cross_attention_norm_->forward(h), in.cross, cross_cache);
    return h + mlp_->forward(mlp_norm_->forward(h));
  }
  h = attention_norm_->forward(h + attention_->forward(h, in.self, self_cache));
  if (cross_attention_)
    h = cross_attention_norm_->forward(h + cross_attention_->forward(h, in.cross, cross_cache));
  return mlp_norm_->forward(h + mlp_->forward(h));
}

}  // namespace libai::models
