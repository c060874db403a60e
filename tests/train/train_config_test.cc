// Reading a training setup from LiBai's config keys, and the errors for bad values.
#include <gtest/gtest.h>

#include "runtime/config/yaml_reader.h"
#include "train/train_config.h"

namespace libai::train {
namespace {

config::Config parse(const std::string& yaml) {
  return config::Config(config::parse_yaml(yaml, config::Location{"test.yaml", 1, 1}));
}

TEST(TrainConfig, ReadsLibaiKeys) {
  TrainConfig t = train_config_from(parse(R"(
optim:
  _target_: sgd
  lr: 0.1
  weight_decay: 0.001
  momentum: 0.9
  nesterov: true
  params:
    clip_grad_max_norm: 2.0
    clip_grad_norm_type: inf
    weight_decay_bias: 0.5
    overrides: {embed.weight: {weight_decay: 0.0, lr: 0.01}}
train:
  train_micro_batch_size: 4
  global_batch_size: 32
  num_accumulation_steps: null
  train_iter: 200
  warmup_ratio: 0.05
  seed: 7
  scheduler: {_target_: WarmupMultiStepLR, milestones: [0.5, 0.75], gamma: 0.2, warmup_method: constant}
  amp: {enabled: true, dtype: f16, loss_scale: {init_scale: 1024, growth_interval: 100}}
  activation_checkpoint: {enabled: true}
  dist: {data_parallel_size: 2}
)"));
  EXPECT_EQ(t.batch.accumulation, 4);
  EXPECT_EQ(t.step.num_accumulation_steps, 4);
  EXPECT_EQ(t.optimizer.kind, OptimizerKind::sgd);
  EXPECT_TRUE(t.optimizer.nesterov);
  EXPECT_EQ(t.groups.lr, 0.1);
  EXPECT_EQ(t.groups.weight_decay_bias, 0.5);
  EXPECT_EQ(t.groups.overrides.at("embed.weight").at("lr"), 0.01);
  EXPECT_EQ(*t.step.clip_grad_max_norm, 2.0);
  EXPECT_TRUE(std::isinf(t.step.clip_grad_norm_type));
  EXPECT_EQ(t.schedule.kind, LrSchedule::warmup_multistep);
  EXPECT_EQ(t.schedule.warmup_iter, 10);
  EXPECT_EQ(t.schedule.milestones, (std::vector<int64_t>{100, 150}));
  EXPECT_EQ(t.schedule.warmup_method, "constant");
  EXPECT_EQ(t.step.autocast, DType::f16);
  ASSERT_TRUE(t.step.loss_scale.has_value());
  EXPECT_EQ(t.step.loss_scale->init_scale, 1024.0);
  EXPECT_EQ(t.step.loss_scale->growth_interval, 100);
  EXPECT_TRUE(t.step.activation_checkpoint);
  EXPECT_EQ(t.step.seed, 7u);
}

TEST(TrainConfig, Bf16HasNoLossScalingAndClippingShorthandWorks) {
  TrainConfig t = train_config_from(parse(R"(
optim: {lr: 0.001, clip_grad_norm: 1.0}
train: {train_micro_batch_size: 2, train_iter: 10, amp: {enabled: true, dtype: bf16}}
)"));
  EXPECT_EQ(t.step.autocast, DType::bf16);
  EXPECT_FALSE(t.step.loss_scale.has_value());
  EXPECT_EQ(*t.step.clip_grad_max_norm, 1.0);
  EXPECT_EQ(t.optimizer.kind, OptimizerKind::adamw);
}

TEST(TrainConfig, ErrorsNameTheKey) {
  auto message_of = [](const std::string& yaml) {
    try {
      train_config_from(parse(yaml));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of("optim: {_target_: adam}\ntrain: {train_micro_batch_size: 2}")
                .find("optim._target_"),
            std::string::npos);
  EXPECT_NE(message_of("optim: {clip_grad_norm: 1.0, params: {clip_grad_max_norm: 2.0}}\n"
                       "train: {train_micro_batch_size: 2}")
                .find("optim.params.clip_grad_max_norm"),
            std::string::npos);
  EXPECT_NE(message_of("train: {train_micro_batch_size: 2, scheduler: {milestones: [2.0]}}")
                .find("milestones"),
            std::string::npos);
  EXPECT_NE(message_of("train: {train_micro_batch_size: 3, global_batch_size: 8}")
                .find("global_batch_size"),
            std::string::npos);
  EXPECT_NE(message_of("train: {train_micro_batch_size: 2, amp: {enabled: true, dtype: fp8}}")
                .find("train.amp.dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace libai::train
