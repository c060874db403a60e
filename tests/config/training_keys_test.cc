// The training keys of the schema (LiBai's names): their defaults, their ranges, the gradient
// norm's order, the per-parameter overrides and the clip_grad_norm shorthand.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/config/config.h"
#include "app/schema.h"
#include "tests/config/test_files.h"

namespace libai::config {
namespace {

using testing::error_message;

const std::string kDefault = LIBAI_SOURCE_DIR "/configs/default.yaml";

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

// Validation problems of `yaml` (a file basing the shipped defaults), "" when it is valid.
std::string problems_of(const std::string& yaml) {
  const Schema schema = libai_schema();
  LoadOptions options;
  options.schema = &schema;
  const Config cfg = Config::parse("_base_: '" + kDefault + "'\n" + yaml, "job.yaml", options);
  std::string all;
  for (const std::string& problem : schema.check(cfg.root())) all += problem + "\n";
  return all;
}

TEST(TrainingKeys, DefaultsAreLibais) {
  const Config cfg = load_libai_config(kDefault);
  EXPECT_TRUE(cfg.get<bool>("optim.do_bias_correction"));
  EXPECT_DOUBLE_EQ(cfg.get<double>("optim.params.clip_grad_max_norm"), 1.0);
  EXPECT_DOUBLE_EQ(cfg.get<double>("optim.params.clip_grad_norm_type"), 2.0);
  EXPECT_DOUBLE_EQ(cfg.get<double>("optim.params.weight_decay_norm"), 0.0);
  EXPECT_DOUBLE_EQ(cfg.get<double>("optim.params.weight_decay_bias"), 0.0);
  EXPECT_TRUE(cfg.node("optim.params.overrides").is_map());
  EXPECT_EQ(cfg.get<std::string>("train.scheduler._target_"), "WarmupCosineLR");
  EXPECT_DOUBLE_EQ(cfg.get<double>("train.scheduler.warmup_factor"), 0.001);
  EXPECT_DOUBLE_EQ(cfg.get<double>("train.scheduler.alpha"), 0.01);
  EXPECT_EQ(cfg.get<std::string>("train.scheduler.warmup_method"), "linear");
  EXPECT_DOUBLE_EQ(cfg.get<double>("train.warmup_ratio"), 0.0);
  // PyTorch's torch.amp.GradScaler(init_scale=2.**16, growth_factor=2., backoff_factor=.5,
  // growth_interval=2000).
  EXPECT_DOUBLE_EQ(cfg.get<double>("train.amp.loss_scale.init_scale"), std::ldexp(1.0, 16));
  EXPECT_DOUBLE_EQ(cfg.get<double>("train.amp.loss_scale.growth_factor"), 2.0);
  EXPECT_DOUBLE_EQ(cfg.get<double>("train.amp.loss_scale.backoff_factor"), 0.5);
  EXPECT_EQ(cfg.get<int>("train.amp.loss_scale.growth_interval"), 2000);
}

TEST(TrainingKeys, EverySchedulerAndOptimizerIsAccepted) {
  for (const char* target : {"WarmupCosineLR", "WarmupCosineAnnealingLR", "WarmupStepLR",
                             "WarmupMultiStepLR", "WarmupExponentialLR", "WarmupPolynomialLR"})
    EXPECT_EQ(problems_of(std::string("train: {scheduler: {_target_: ") + target + "}}\n"), "");
  EXPECT_EQ(problems_of("optim: {_target_: sgd, momentum: 0.9, nesterov: true}\n"), "");
  const std::string bad = problems_of("train: {scheduler: {_target_: WarmupCosinLR}}\n");
  EXPECT_TRUE(contains(bad, "did you mean 'WarmupCosineLR'?")) << bad;
  EXPECT_TRUE(contains(problems_of("optim: {_target_: adam}\n"), "expected one of adamw, sgd"));
  EXPECT_TRUE(contains(problems_of("train: {scheduler: {warmup_method: cosine}}\n"),
                       "expected one of linear, constant"));
}

TEST(TrainingKeys, Ranges) {
  EXPECT_TRUE(contains(problems_of("train: {scheduler: {milestones: [0.5, 1.5]}}\n"),
                       "key 'train.scheduler.milestones[1]': out of range: expected a number "
                       "in (0, 1], got 1.5"));
  EXPECT_TRUE(contains(problems_of("train: {scheduler: {milestones: [0, 0.5]}}\n"),
                       "milestones[0]': out of range"));
  EXPECT_EQ(problems_of("train: {scheduler: {milestones: [0.25, 1]}}\n"), "");
  EXPECT_TRUE(contains(problems_of("train: {warmup_ratio: 1.5}\n"), "expected a number in [0, 1]"));
  EXPECT_TRUE(contains(problems_of("train: {amp: {loss_scale: {backoff_factor: 1}}}\n"),
                       "expected a number in (0, 1), got 1"));
  EXPECT_TRUE(contains(problems_of("train: {amp: {loss_scale: {growth_factor: 1}}}\n"),
                       "expected a number > 1, got 1"));
  EXPECT_TRUE(contains(problems_of("train: {scheduler: {step_size: 0}}\n"), "got 0"));
  EXPECT_TRUE(contains(problems_of("optim: {momentum: -0.1}\n"), "got -0.1"));
}

TEST(TrainingKeys, NormTypeIsTwoOrInf) {
  for (const char* order : {"2", "2.0", "inf", "\"inf\"", ".inf"})
    EXPECT_EQ(problems_of(std::string("optim: {params: {clip_grad_norm_type: ") + order + "}}\n"),
              "")
        << order;
  for (const char* order : {"1", "3.0", "-.inf", "infinity", "null", "[2]"}) {
    const std::string problem =
        problems_of(std::string("optim: {params: {clip_grad_norm_type: ") + order + "}}\n");
    EXPECT_TRUE(contains(problem, "key 'optim.params.clip_grad_norm_type': ")) << problem;
    EXPECT_TRUE(contains(problem, "expected 2 or inf, got ")) << order << ": " << problem;
  }
}

TEST(TrainingKeys, PerParameterOverrides) {
  EXPECT_EQ(problems_of("optim:\n  params:\n    overrides:\n      lm_head.weight: {lr: 0.1}\n"
                        "      model.embeddings.word_embeddings.weight: {weight_decay: 0.0}\n"),
            "");
  const std::string typo =
      problems_of("optim:\n  params:\n    overrides:\n      lm_head.weight: {lrr: 0.1}\n");
  EXPECT_TRUE(contains(typo,
                       "unknown key 'optim.params.overrides.lm_head.weight.lrr' (did you "
                       "mean 'lr'?)"))
      << typo;
  EXPECT_TRUE(contains(problems_of("optim: {params: {overrides: {w: {lr: 0}}}}\n"),
                       "expected a number > 0, got 0"));
}

TEST(TrainingKeys, ClipGradNormIsAShorthand) {
  // In a file: stored under the full key.
  const std::string yaml_in_file = problems_of("optim: {clip_grad_norm: 0.5}\n");
  EXPECT_EQ(yaml_in_file, "");
  testing::TempDir dir;
  const std::string path =
      dir.write("job.yaml", "_base_: '" + kDefault + "'\noptim: {clip_grad_norm: 0.5}\n");
  const Config from_file = load_libai_config(path);
  EXPECT_DOUBLE_EQ(from_file.get<double>("optim.params.clip_grad_max_norm"), 0.5);
  EXPECT_FALSE(from_file.has("optim.clip_grad_norm"));
  // null turns clipping off, as the full key's null does.
  const std::string off =
      dir.write("off.yaml", "_base_: '" + kDefault + "'\noptim: {clip_grad_norm: null}\n");
  EXPECT_TRUE(load_libai_config(off).node("optim.params.clip_grad_max_norm").is_null());
  // On the command line.
  const Config overridden = load_libai_config(kDefault, {"optim.clip_grad_norm=2"});
  EXPECT_DOUBLE_EQ(overridden.get<double>("optim.params.clip_grad_max_norm"), 2.0);
  EXPECT_FALSE(overridden.has("optim.clip_grad_norm"));
  // A later file replaces what its base set under the other name.
  const std::string base = dir.write(
      "base.yaml", "_base_: '" + kDefault + "'\noptim: {params: {clip_grad_max_norm: 3}}\n");
  const std::string child =
      dir.write("child.yaml", "_base_: base.yaml\noptim: {clip_grad_norm: 4}\n");
  EXPECT_DOUBLE_EQ(load_libai_config(child).get<double>("optim.params.clip_grad_max_norm"), 4.0);
  // The same value twice in one file is fine (1 and 1.0 are the same setting).
  const std::string same = dir.write(
      "same.yaml", "_base_: '" + kDefault +
                       "'\noptim:\n  clip_grad_norm: 1\n  params: {clip_grad_max_norm: 1.0}\n");
  EXPECT_DOUBLE_EQ(load_libai_config(same).get<double>("optim.params.clip_grad_max_norm"), 1.0);
}

TEST(TrainingKeys, ClipGradNormAndTheFullKeyDifferingIsAnError) {
  testing::TempDir dir;
  const std::string path = dir.write("job.yaml", "_base_: '" + kDefault +
                                                     "'\noptim:\n  clip_grad_norm: 0.5\n"
                                                     "  params:\n    clip_grad_max_norm: 1.0\n");
  const std::string message = error_message<InvalidArgument>([&] { load_libai_config(path); });
  EXPECT_TRUE(contains(message, path + ":3:3: optim.clip_grad_norm = 0.5 and " + path +
                                    ":5:5: optim.params.clip_grad_max_norm = 1.0 differ"))
      << message;
  EXPECT_TRUE(contains(message,
                       "optim.clip_grad_norm is a shorthand for "
                       "optim.params.clip_grad_max_norm; set one of them"))
      << message;
}

// Megatron's pipeline schedules under LiBai-style keys: 1F1B by default, one chunk per rank.
TEST(TrainingKeys, PipelineScheduleKeys) {
  const Config cfg = load_libai_config(kDefault);
  EXPECT_EQ(cfg.get<std::string>("train.dist.pipeline_schedule"), "1f1b");
  EXPECT_EQ(cfg.get<int>("train.dist.virtual_pipeline_size"), 1);
  for (const char* schedule : {"gpipe", "1f1b", "interleaved"})
    EXPECT_EQ(problems_of(std::string("train: {dist: {pipeline_schedule: ") + schedule + "}}\n"),
              "");
  EXPECT_EQ(problems_of("train: {dist: {pipeline_schedule: interleaved, virtual_pipeline_size: "
                        "4}}\n"),
            "");
  const std::string bad = problems_of("train: {dist: {pipeline_schedule: 1f2b}}\n");
  EXPECT_TRUE(contains(bad,
                       "key 'train.dist.pipeline_schedule': expected one of gpipe, 1f1b, "
                       "interleaved"))
      << bad;
  const std::string zero = problems_of("train: {dist: {virtual_pipeline_size: 0}}\n");
  EXPECT_TRUE(contains(zero, "key 'train.dist.virtual_pipeline_size'")) << zero;
  EXPECT_TRUE(contains(zero, "got 0")) << zero;
}

}  // namespace
}  // namespace libai::config
