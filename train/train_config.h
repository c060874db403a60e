// A training setup from a config with LiBai's keys (docs/CONFIG.md lists them):
//   optim:  _target_ (adamw | sgd), lr, weight_decay, betas, eps, do_bias_correction, momentum,
//           dampening, nesterov, params.{clip_grad_max_norm, clip_grad_norm_type,
//           weight_decay_norm, weight_decay_bias, overrides}; clip_grad_norm (shorthand)
//   train:  train_micro_batch_size, global_batch_size, num_accumulation_steps, train_iter,
//           warmup_ratio, seed, scheduler.{_target_, warmup_factor, warmup_method, alpha,
//           eta_min, step_size, gamma, milestones (ratios of train_iter), power,
//           end_learning_rate, cycle}, amp.{enabled, dtype, loss_scale.*},
//           activation_checkpoint.enabled, dist.data_parallel_size
//
//   config::Config cfg = config::Config::load("configs/train_gpt2.yaml", overrides);
//   train::TrainConfig t = train::train_config_from(cfg);
//   auto optimizer = train::make_optimizer(train::default_param_groups(model, t.groups),
//   t.optimizer); train::LrScheduler schedule(t.schedule); train::TrainStep step(model, *optimizer,
//   &schedule, t.step, groups);
#pragma once

#include "runtime/config/config.h"
#include "train/batch_config.h"
#include "train/train_step.h"

namespace libai::train {

struct TrainConfig {
  BatchConfig batch;
  int64_t train_iter = 0;
  ParamGroupOptions groups;
  OptimizerOptions optimizer;
  LrSchedulerOptions schedule;
  TrainStepOptions step;
};

// Errors name the key and where it was written.
TrainConfig train_config_from(const config::Config& cfg);

}  // namespace libai::train
