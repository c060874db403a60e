#include "models/layers/mlp.h"

#include "ops/ops.h"

namespace libai::models {

Mlp::Mlp(const LayerContext& ctx, const MlpConfig& config) : config_(config) {
  if (config.gated)
    gate_ = &add_module("gate", std::make_unique<Linear>(ctx, config.hidden, config.intermediate,
                                                          config.bias));
  up_ = &add_module("up", std::make_unique<Linear>(ctx, config.hidden, config.intermediate, config.bias));
  down_ = &add_module("down",
                      std::make_unique<Linear>(ctx, config.intermediate, config.hidden, config.bias));
}

Tensor Mlp::forward(const Tensor& x) const {
  Tensor h;  // [..., intermediate]
  if (config_.gated)
    h = ops::mul(apply_activation(config_.activation, gate_->forward(x)), up_->forward(x));
  else
    h = apply_activation(config_.activation, up_->forward(x));
  return down_->forward(h);
}

}  // namespace libai::models
