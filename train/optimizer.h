// Optimizers over parameter groups: AdamW and SGD as torch.optim runs them, with LiBai's
// default parameter groups (no weight decay on norms and biases).
//
//   model.set_requires_grad(true);
//   auto groups = train::default_param_groups(model, {.lr = 1e-4, .weight_decay = 0.01});
//   auto optimizer = train::make_optimizer(std::move(groups), {.kind = OptimizerKind::adamw});
//   for (int64_t iter = 0; iter < max_iter; ++iter) {
//     for (auto& group : optimizer->groups()) group.lr = scheduler.lr(group.base_lr, iter);
//     ... backward ...
//     optimizer->step();
//     optimizer->zero_grad();
//   }
//
// Each parameter is updated by one fused kernel (ops/optimizer.h); see Note [LiBai's updates
// and torch's] there for where LiBai (OneFlow) rounds or counts differently from torch. These
// optimizers follow torch: AdamW's bias correction counts each parameter's own steps.
//
// Note [Parameter groups as LiBai forms them]
// LiBai's get_default_optimizer_params walks the modules depth first and gives each
// parameter that requires grad the defaults, then weight_decay_norm when its module is a
// normalisation layer, then the overrides under its name; `weight_decay_bias` is an override
// under the name "bias", so an explicit "bias" override conflicts with it. Parameters with
// equal hyper-parameters then share a group, groups in order of first appearance and
// parameters in registration order. LiBai matches overrides by a parameter's own name inside
// its module ("bias", "weight"); here a key may also be the full dotted name
// ("embed.weight"), which is applied after the short one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/module.h"
#include "runtime/tensor.h"

namespace libai::train {

struct ParamGroup {
  std::vector<std::string> names;
  std::vector<Tensor*> params;
  double base_lr = 0;
  double lr = 0;  // what the next step uses (the scheduler sets it)
  double weight_decay = 0;
};

struct ParamGroupOptions {
  double lr = 1e-4, weight_decay = 0.01, weight_decay_norm = 0.0, weight_decay_bias = 0.0;
  // Parameter name -> {"lr" | "weight_decay": value}. A name that matches no parameter, or
  // another key, is an InvalidArgument.
  std::map<std::string, std::map<std::string, double>> overrides;
};

// See Note [Parameter groups as LiBai forms them]. Each group's lr starts at its base_lr.
std::vector<ParamGroup> default_param_groups(models::Module& model,
                                             const ParamGroupOptions& options);

enum class OptimizerKind { adamw, sgd };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::adamw;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool bias_correction = true;  // LiBai's do_bias_correction (torch always corrects)
  double momentum = 0, dampening = 0;
  bool nesterov = false;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  // Updates every parameter with a defined .grad() (f32, the parameter's shape); parameters
  // without one are skipped and keep their state, as in torch.
  virtual void step() = 0;
  // Drops every parameter's .grad.
  void zero_grad();
  std::vector<ParamGroup>& groups() { return groups_; }
  // The kind and hyper-parameters it was made with.
  virtual OptimizerOptions options() const = 0;
  int64_t steps_taken() const { return steps_taken_; }
  // State for checkpoints: "step" (steps_taken, i64 scalar) and per parameter with state
  // "<name>.exp_avg", "<name>.exp_avg_sq", "<name>.step" (AdamW; i64 scalar: that
  // parameter's own count) or "<name>.momentum_buffer" (SGD with momentum). The tensors are
  // the live state (no copy); save them before the next step.
  virtual std::map<std::string, Tensor> state_tensors() = 0;
  // Replaces all state by copies of `state`. InvalidArgument on a missing "step", a
  // parameter's partial state, a shape or dtype that does not match its parameter, or a key
  // that names no parameter of this optimizer.
  virtual void load_state_tensors(const std::map<std::string, Tensor>& state) = 0;

 protected:
  explicit Optimizer(std::vector<ParamGroup> groups);
  std::vector<ParamGroup> groups_;
  int64_t steps_taken_ = 0;
};

// The per-parameter keys of state_tensors() ("<name>.<key>") for an optimizer made with
// `options`: "exp_avg", "exp_avg_sq", "step" (AdamW); "momentum_buffer" (SGD with momentum).
std::vector<std::string> parameter_state_keys(const OptimizerOptions& options);

// Checks the groups (names match params, no parameter twice, f32 parameters) and options
// (betas in [0, 1), eps >= 0, nesterov only with momentum and no dampening).
std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups,
                                          const OptimizerOptions& options);

}  // namespace libai::train
