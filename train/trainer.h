// The trainer: a training run from one config, as `libai-actor train CONFIG` runs it.
//
//   config::Config cfg = config::Config::load("configs/demo/char_gpt.yaml", overrides);
//   train::TrainResult r = train::run_training(cfg, {.resume = true});
//
// What it does (docs/TRAINING.md, "The trainer"):
//   model     model.weights (a Hugging Face folder or one of our checkpoints: fine-tuning) or
//             model.config (a config.json: a new model, initialised by models::init_parameters)
//   data      data._target_ gpt | bert | t5 | image_folder (train/data_config.h)
//   layout    train.dist.data_parallel_size x pipeline_parallel_size x tensor_parallel_size
//             ranks on threads of this process; pp > 1 runs the eager SPMD pipeline
//             (train/pipeline_runner.h: pipeline_schedule, virtual_pipeline_size); the loop
//             and the step runners: train/step_runner.h
//   loop      train_iter steps (or train_epoch epochs of the training split), each over
//             num_accumulation_steps micro-batches per rank, prefetched on a thread
//   hooks     every log_period: a console line, metrics.json, TensorBoard; every
//             checkpointer.period: a checkpoint (max_to_keep); every evaluation.eval_period:
//             the validation loss (perplexity, accuracy) and model_best; at the end model_final
//             and loss_curve.svg; config.yaml (the resolved config) at the start
//   resume    --resume continues from output_dir's last complete checkpoint: same weights,
//             optimizer state, loss scale, step and data position, so the losses that follow
//             are bitwise those of the run that was never stopped
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "runtime/config/config.h"

namespace libai::train {

struct TrainerFlags {
  bool resume = false;        // continue from the last checkpoint in output_dir (none: start)
  bool eval_only = false;     // evaluate the model once, no training
  bool fast_dev_run = false;  // 2 steps, 1 evaluation batch, one checkpoint: a smoke test
};

struct TrainResult {
  int64_t first_iteration = 0;  // 0, or where a resumed run started
  int64_t iterations = 0;       // the step count at the end
  std::vector<double> losses;   // every step this run took, in order
  std::optional<double> eval_loss;
  std::filesystem::path output_dir;
};

TrainResult run_training(const config::Config& cfg, const TrainerFlags& flags = {});

}  // namespace libai::train
