#include "models/layers/transformer_layer.h"

#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::models {

TransformerLayer::TransformerLayer(const LayerContext& ctx, const TransformerLayerConfig& config)
    : config_(config) {
  const int64_t h = config.attention.hidden;
  auto norm = [&] {
    return std::make_unique<Norm>(ctx, config.norm, h, config.norm_eps, config.norm_bias);
  };
  auto dropout = [&] { return std::make_unique<Dropout>(config.dropout); };
  AttentionConfig self = config.attention;
  self.cross = false;
  attention_ = &add_module("attention", std::make_unique<Attention>(ctx, self));
  attention_norm_ = &add_module("attention_norm", norm());
  attention_dropout_ = &add_module("attention_dropout", dropout());
  if (config.cross_attention) {
    AttentionConfig cross = config.attention;
    cross.cross = true;
    cross_attention_ = &add_module("cross_attention", std::make_unique<Attention>(ctx, cross));
    cross_attention_norm_ = &add_module("cross_attention_norm", norm());
    cross_attention_dropout_ = &add_module("cross_attention_dropout", dropout());
  }
  mlp_ = &add_module("mlp", std::make_unique<Mlp>(ctx, config.mlp));
  mlp_norm_ = &add_module("mlp_norm", norm());
  mlp_dropout_ = &add_module("mlp_dropout", dropout());
}

Tensor TransformerLayer::forward(const Tensor& x, const LayerInputs& in, LayerCache* cache) const {
  ParameterFetch* fetch = training_mode().fetch;
  if (!fetch) return forward_fetched(x, in, cache);
  // Note [Parameters fetched around a layer]
  fetch->fetch(*this);
  Tensor y = forward_fetched(x, in, cache);
  fetch->release(*this);
  return autograd::record(y, "fetch_layer_parameters", {y}, [fetch, this](const Tensor& g) {
    fetch->fetch(*this);
    return std::vector<Tensor>{g};
  });
}

Tensor TransformerLayer::forward_fetched(const Tensor& x, const LayerInputs& in,
                                         LayerCache* cache) const {
  const TrainingMode& mode = training_mode();
  if (!mode.activation_checkpoint || !autograd::grad_enabled() || cache)
    return compute(x, in, cache);
  // Tensors with history enter as checkpoint inputs (T5's relative bias comes from a table,
  // cross-attention's memory from the encoder); the masks are constants, captured. The
  // recomputation runs under this forward's mode, without nesting another checkpoint.
  TrainingMode recompute_mode = mode;
  recompute_mode.activation_checkpoint = false;
  LayerInputs masks = in;
  auto fn = [this, masks, recompute_mode](const std::vector<Tensor>& t) {
    TrainingModeGuard guard(recompute_mode);
    LayerInputs layer_in = masks;
    layer_in.self.bias = t[1];
    layer_in.cross.memory = t[2];
    layer_in.cross.bias = t[3];
    return compute(t[0], layer_in, nullptr);
  };
  return autograd::checkpoint(fn, {x, in.self.bias, in.cross.memory, in.cross.bias});
}

Tensor TransformerLayer::compute(const Tensor& x, const LayerInputs& in, LayerCache* cache) const {
  KVCache* self_cache = cache ? &cache->self : nullptr;
  KVCache* cross_cache = cache ? &cache->cross : nullptr;
  // residual + dropout(y): with the dropout off, the add happens inside the block's last
  // product (Attention's and Mlp's `residual`).
  const auto add = [](const Dropout& dropout, const Tensor& residual, auto&& block) {
    if (!dropout.active()) return block(residual);
    return residual + dropout.forward(block(Tensor()));
  };
  Tensor h = x;  // [batch, seq, hidden]
  if (config_.pre_norm) {
    const Tensor normed = attention_norm_->forward(h);
    h = add(*attention_dropout_, h, [&](const Tensor& r) {
      return attention_->forward(normed, in.self, self_cache, r);
    });
    if (cross_attention_) {
      const Tensor cross_in = cross_attention_norm_->forward(h);
      h = add(*cross_attention_dropout_, h, [&](const Tensor& r) {
        return cross_attention_->forward(cross_in, in.cross, cross_cache, r);
      });
    }
    const Tensor mlp_in = mlp_norm_->forward(h);
    return add(*mlp_dropout_, h, [&](const Tensor& r) { return mlp_->forward(mlp_in, r); });
  }
  h = attention_norm_->forward(add(*attention_dropout_, h, [&](const Tensor& r) {
    return attention_->forward(h, in.self, self_cache, r);
  }));
  if (cross_attention_)
    h = cross_attention_norm_->forward(add(*cross_attention_dropout_, h, [&](const Tensor& r) {
      return cross_attention_->forward(h, in.cross, cross_cache, r);
    }));
  return mlp_norm_->forward(
      add(*mlp_dropout_, h, [&](const Tensor& r) { return mlp_->forward(h, r); }));
}

}  // namespace libai::models
