// `libai-actor train CONFIG [key=value ...] [--resume] [--eval-only] [--fast-dev-run]`: a
// training run from a config with LiBai's keys (train/trainer.h; docs/TRAINING.md). Prints a
// line per train.log_period, writes train.output_dir (checkpoints, metrics.json, TensorBoard
// events, config.yaml, loss_curve.svg); --resume continues from the last checkpoint there.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bin/commands.h"
#include "runtime/config/libai_schema.h"
#include "train/trainer.h"

namespace libai::cli {
namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  train::TrainerFlags flags;
};

int train_command(const TrainOptions& options) {
  const config::Config cfg = config::load_libai_config(options.config, options.overrides, {});
  const train::TrainResult r = train::run_training(cfg, options.flags);
  if (options.flags.eval_only) {
    if (r.eval_loss) std::printf("eval loss %.6f\n", *r.eval_loss);
  } else {
    std::printf("trained steps %lld to %lld; last loss %.6f", (long long)r.first_iteration,
                (long long)r.iterations, r.losses.empty() ? 0.0 : r.losses.back());
    if (r.eval_loss) std::printf("; eval loss %.6f", *r.eval_loss);
    std::printf("\noutput: %s\n", r.output_dir.string().c_str());
  }
  return kExitOk;
}

}  // namespace

CommandAction setup_train(CLI::App& command) {
  auto options = std::make_shared<TrainOptions>();
  command.add_option("CONFIG", options->config, "training config (YAML)")->required();
  command.add_option("overrides", options->overrides,
                     "KEY=VALUE overrides, e.g. train.train_iter=100");
  command.add_flag("--resume", options->flags.resume,
                   "continue from the last checkpoint in train.output_dir");
  command.add_flag("--eval-only", options->flags.eval_only,
                   "evaluate once on the validation split, no training");
  command.add_flag("--fast-dev-run", options->flags.fast_dev_run,
                   "2 steps, 1 evaluation batch and one checkpoint: a quick check of a config");
  return [options] { return train_command(*options); };
}

}  // namespace libai::cli
