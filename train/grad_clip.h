// The global gradient norm and clipping by it, over any tensor- and data-parallel layout.
//
//   auto params = model.parameter_infos();
//   double norm = train::clip_grad_norm(params, /*max_norm=*/1.0, /*norm_type=*/2.0, {.tp = tp});
//
// Note [Each element counted once]: the norm is that of the one-device model's gradient.
// A parameter split over the tensor-parallel group contributes its local shard on every tp
// rank (padding rows of an uneven split hold zero gradients); a parameter replicated over the
// group (split_dim == -1) has the same gradient on every tp rank and contributes on tp rank 0
// only. Data-parallel replicas hold the same reduced gradient, so nothing is summed over dp;
// a group whose ranks hold disjoint shards of the gradients (`sharded`: ZeRO, pipeline
// stages) is summed over. Sums of squares accumulate in f64, and the 2-norm is the square
// root of the reduced sum; the inf-norm is a MAX reduction. Every rank returns the same norm.
//
// Clipping follows torch.nn.utils.clip_grad_norm_ and Megatron: coefficient
// max_norm / (norm + 1e-6), applied only when below 1. A non-finite norm leaves the gradients
// alone (the loss scaler skips such steps).
#pragma once

#include <limits>
#include <memory>
#include <vector>

#include "models/module.h"
#include "runtime/comm/communicator.h"

namespace libai::train {

struct NormGroups {
  std::shared_ptr<comm::Communicator> tp;  // parameters split or replicated over it
  std::vector<std::shared_ptr<comm::Communicator>> sharded;  // groups holding disjoint gradients
};

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// The norm of the gradients of `params` (parameters with no gradient contribute nothing).
// norm_type: 2 (or any p >= 1) or kInfNorm.
double global_grad_norm(const std::vector<models::ParameterInfo>& params, double norm_type,
                        const NormGroups& groups = {});

// Scales the gradients by min(1, max_norm / (norm + 1e-6)) and returns the norm before
// clipping. max_norm > 0.
double clip_grad_norm(const std::vector<models::ParameterInfo>& params, double max_norm,
                      double norm_type, const NormGroups& groups = {});

// Multiplies every defined gradient by `factor` in place (f32/f64 CPU gradients).
void scale_grads(const std::vector<models::ParameterInfo>& params, double factor);

}  // namespace libai::train
