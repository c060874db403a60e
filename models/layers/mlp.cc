#include "models/layers/mlp.h"

#include "ops/ops.h"

namespace libai::models {

// Tensor parallel: up (and gate) column-parallel, down row-parallel, so the intermediate
// activation stays split and the block costs one all-reduce forward.
Mlp::Mlp(const LayerContext& ctx, const MlpConfig& config) : config_(config) {
  LIBAI_CHECK(config.intermediate % ctx.tp_size() == 0, "mlp: tensor_parallel_size ", ctx.tp_size(),
              " does not divide the intermediate size ", config.intermediate);
  const auto col = Parallel::column, row = Parallel::row;
  if (config.gated)
    gate_ = &add_module("gate", std::make_unique<Linear>(ctx, config.hidden, config.intermediate,
                                                         config.bias, col));
  up_ = &add_module(
      "up", std::make_unique<Linear>(ctx, config.hidden, config.intermediate, config.bias, col));
  down_ = &add_module(
      "down", std::make_unique<Linear>(ctx, config.intermediate, config.hidden, config.bias, row));
  dropout_ = &add_module("dropout", std::make_unique<Dropout>(config.dropout));
  first_feature_ = ctx.tp_rank() * (config.intermediate / ctx.tp_size());
}

Tensor Mlp::forward(const Tensor& x, const Tensor& residual) const {
  Tensor h;  // [..., intermediate]
  if (config_.gated)
    h = ops::mul(gate_->forward(x, config_.activation, Tensor()), up_->forward(x));
  else
    h = up_->forward(x, config_.activation, Tensor());
  if (dropout_->active())  // the intermediate is split by columns under tensor parallelism
    h = dropout_->forward(
        h, {.dim = h.dim() - 1, .start = first_feature_, .logical_size = config_.intermediate});
  return down_->forward(h, std::nullopt, residual);
}

}  // namespace libai::models
