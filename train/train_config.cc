#include "train/train_config.h"

#include <cmath>

#include "runtime/error.h"
#include "train/grad_clip.h"

namespace libai::train {
namespace {

std::string where(const config::Config& cfg, const std::string& key) {
  const config::Node* node = cfg.root().find_path(key);
  return node ? node->describe() : "key '" + key + "'";
}

double norm_type_of(const config::Config& cfg, const std::string& key) {
  const config::Node* node = cfg.root().find_path(key);
  if (!node || node->is_null()) return 2.0;
  if (node->kind() == config::Node::Kind::string) {
    LIBAI_CHECK(node->as_string() == "inf", where(cfg, key), ": expected a number >= 1 or \"inf\"");
    return kInfNorm;
  }
  const double p = node->as_float();
  LIBAI_CHECK(std::isinf(p) || p >= 1.0, where(cfg, key), ": expected a number >= 1 or inf");
  return p;
}

void read_optimizer(const config::Config& cfg, TrainConfig& t) {
  const auto target = cfg.get_or<std::string>("optim._target_", "adamw");
  LIBAI_CHECK(target == "adamw" || target == "sgd", where(cfg, "optim._target_"),
              ": the optimizers are adamw and sgd");
  t.optimizer.kind = target == "sgd" ? OptimizerKind::sgd : OptimizerKind::adamw;
  t.groups.lr = cfg.get_or<double>("optim.lr", 1e-4);
  t.groups.weight_decay = cfg.get_or<double>("optim.weight_decay", target == "sgd" ? 0.0 : 0.01);
  t.groups.weight_decay_norm = cfg.get_or<double>("optim.params.weight_decay_norm", 0.0);
  t.groups.weight_decay_bias = cfg.get_or<double>("optim.params.weight_decay_bias", 0.0);
  if (const config::Node* overrides = cfg.root().find_path("optim.params.overrides");
      overrides && overrides->is_map())
    for (const auto& [name, values] : overrides->entries()) {
      LIBAI_CHECK(values.is_map(), values.describe(),
                  ": expected a mapping such as {weight_decay: 0.0, lr: 1e-3}");
      for (const auto& [key, value] : values.entries()) {
        LIBAI_CHECK(key == "lr" || key == "weight_decay", value.describe(),
                    ": a parameter override sets lr or weight_decay");
        t.groups.overrides[name][key] = value.as_float();
      }
    }
  const auto betas = cfg.get_or<std::vector<double>>("optim.betas", {0.9, 0.999});
  LIBAI_CHECK(betas.size() == 2, where(cfg, "optim.betas"), ": expected [beta1, beta2]");
  t.optimizer.beta1 = betas[0];
  t.optimizer.beta2 = betas[1];
  t.optimizer.eps = cfg.get_or<double>("optim.eps", 1e-8);
  t.optimizer.bias_correction = cfg.get_or<bool>("optim.do_bias_correction", true);
  t.optimizer.momentum = cfg.get_or<double>("optim.momentum", 0.0);
  t.optimizer.dampening = cfg.get_or<double>("optim.dampening", 0.0);
  t.optimizer.nesterov = cfg.get_or<bool>("optim.nesterov", false);

  auto max_norm =
      cfg.get_or<std::optional<double>>("optim.params.clip_grad_max_norm", std::nullopt);
  const auto shorthand = cfg.get_or<std::optional<double>>("optim.clip_grad_norm", std::nullopt);
  if (shorthand && max_norm && *shorthand != *max_norm)
    LIBAI_THROW(InvalidArgument, where(cfg, "optim.clip_grad_norm"), " and ",
                where(cfg, "optim.params.clip_grad_max_norm"), " disagree; set one of them");
  if (!max_norm) max_norm = shorthand;
  t.step.clip_grad_max_norm = max_norm;
  t.step.clip_grad_norm_type = norm_type_of(cfg, "optim.params.clip_grad_norm_type");
}

void read_schedule(const config::Config& cfg, TrainConfig& t) {
  LrSchedulerOptions& s = t.schedule;
  s.kind =
      lr_schedule_from_name(cfg.get_or<std::string>("train.scheduler._target_", "WarmupCosineLR"));
  s.max_iter = t.train_iter;
  const double warmup_ratio = cfg.get_or<double>("train.warmup_ratio", 0.0);
  LIBAI_CHECK(warmup_ratio >= 0 && warmup_ratio <= 1, where(cfg, "train.warmup_ratio"),
              ": expected a ratio in [0, 1]");
  s.warmup_iter = int64_t(warmup_ratio * double(t.train_iter));
  s.warmup_factor = cfg.get_or<double>("train.scheduler.warmup_factor", s.warmup_factor);
  s.warmup_method = cfg.get_or<std::string>("train.scheduler.warmup_method", s.warmup_method);
  s.alpha = cfg.get_or<double>("train.scheduler.alpha", s.alpha);
  s.eta_min = cfg.get_or<double>("train.scheduler.eta_min", s.eta_min);
  s.step_size = cfg.get_or<int64_t>("train.scheduler.step_size", s.step_size);
  s.gamma = cfg.get_or<double>("train.scheduler.gamma", s.gamma);
  for (double ratio : cfg.get_or<std::vector<double>>("train.scheduler.milestones", {})) {
    LIBAI_CHECK(ratio > 0 && ratio <= 1, where(cfg, "train.scheduler.milestones"),
                ": milestones are ratios of train.train_iter in (0, 1]");
    s.milestones.push_back(int64_t(ratio * double(t.train_iter)));
  }
  s.power = cfg.get_or<double>("train.scheduler.power", s.power);
  s.end_learning_rate =
      cfg.get_or<double>("train.scheduler.end_learning_rate", s.end_learning_rate);
  s.cycle = cfg.get_or<bool>("train.scheduler.cycle", s.cycle);
}

void read_precision(const config::Config& cfg, TrainConfig& t) {
  if (!cfg.get_or<bool>("train.amp.enabled", false)) return;
  const auto dtype = cfg.get_or<std::string>("train.amp.dtype", "bf16");
  LIBAI_CHECK(dtype == "bf16" || dtype == "f16", where(cfg, "train.amp.dtype"),
              ": expected bf16 or f16");
  t.step.autocast = dtype == "bf16" ? DType::bf16 : DType::f16;
  if (dtype == "f16") {
    GradScalerOptions s;
    s.init_scale = cfg.get_or<double>("train.amp.loss_scale.init_scale", s.init_scale);
    s.growth_factor = cfg.get_or<double>("train.amp.loss_scale.growth_factor", s.growth_factor);
    s.backoff_factor = cfg.get_or<double>("train.amp.loss_scale.backoff_factor", s.backoff_factor);
    s.growth_interval =
        cfg.get_or<int64_t>("train.amp.loss_scale.growth_interval", s.growth_interval);
    t.step.loss_scale = s;
  }
}

}  // namespace

TrainConfig train_config_from(const config::Config& cfg) {
  TrainConfig t;
  const int64_t dp = cfg.get_or<int64_t>("train.dist.data_parallel_size", 1);
  t.batch = reconcile_batch(
      {.micro = cfg.get_or<std::optional<int64_t>>("train.train_micro_batch_size", std::nullopt),
       .global = cfg.get_or<std::optional<int64_t>>("train.global_batch_size", std::nullopt),
       .accumulation =
           cfg.get_or<std::optional<int64_t>>("train.num_accumulation_steps", std::nullopt)},
      dp);
  t.train_iter = cfg.get_or<int64_t>("train.train_iter", 1);
  LIBAI_CHECK(t.train_iter >= 0, where(cfg, "train.train_iter"), ": expected >= 0");
  read_optimizer(cfg, t);
  read_schedule(cfg, t);
  read_precision(cfg, t);
  t.step.num_accumulation_steps = t.batch.accumulation;
  t.step.activation_checkpoint = cfg.get_or<bool>("train.activation_checkpoint.enabled", false);
  t.step.seed = uint64_t(cfg.get_or<int64_t>("train.seed", 1234));
  // LiBai's key: stage 1 unless set; off unless enabled (train/zero.h).
  if (cfg.get_or<bool>("train.zero_optimization.enabled", false))
    t.step.zero_stage = cfg.get_or<int>("train.zero_optimization.stage", 1);
  return t;
}

}  // namespace libai::train
