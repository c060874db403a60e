// One optimizer step over the micro-batches of a global batch, on one device or as one rank of
// the eager SPMD harness (tensor- and data-parallel groups). docs/TRAINING.md, "One step".
//
//   auto groups = train::default_param_groups(*model, {.lr = 1e-4, .weight_decay = 0.01});
//   auto optimizer = train::make_optimizer(std::move(groups), {});
//   train::LrScheduler schedule({.max_iter = 1000, .warmup_iter = 100});
//   train::TrainStep step(*model, *optimizer, &schedule, {.num_accumulation_steps = 4,
//                                                          .clip_grad_max_norm = 1.0});
//   for (...) {
//     train::StepResult r = step.run(micro_batches);   // this rank's 4 micro-batches
//     log(r.loss, r.grad_norm, r.lr);
//   }
//
// Note [Micro-batch order]: micro-batch k of data-parallel rank r holds the global batch's
// samples [(k dp + r) micro, (k dp + r + 1) micro), as Megatron's and LiBai's samplers deal
// them out. Dropout is keyed by those global sample indices (models/training_mode.h), so one
// device accumulating the dp x k micro-batches in that order computes exactly what the dp ranks
// compute together.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/comm/communicator.h"
#include "train/grad_scaler.h"
#include "train/loss.h"
#include "train/lr_scheduler.h"
#include "train/optimizer.h"

namespace libai::train {

struct TrainStepOptions {
  int64_t num_accumulation_steps = 1;
  std::optional<double> clip_grad_max_norm;     // none: no clipping (the norm is still reported)
  double clip_grad_norm_type = 2.0;             // 2, any p >= 1, or kInfNorm
  DType autocast = DType::f32;                  // bf16 / f16: matrix products in 16 bits
  std::optional<GradScalerOptions> loss_scale;  // dynamic loss scaling (f16)
  bool activation_checkpoint = false;
  bool dropout = true;  // the model's dropout probabilities apply (false: as in eval)
  uint64_t seed = 1234;
  LossOptions loss;
  int64_t bucket_bytes = 25 << 20;  // data-parallel gradient buckets
  // ZeRO stage (train.zero_optimization): 0 off, 1 optimizer state, 2 + gradients, 3 +
  // parameters sharded over the data-parallel group (train/zero.h). StageStep only.
  int zero_stage = 0;
};

struct ParallelGroups {
  std::shared_ptr<comm::Communicator> tp;  // the model's tensor-parallel group (null: none)
  std::shared_ptr<comm::Communicator> dp;  // replicas averaging gradients (null: none)
};

struct StepResult {
  int64_t step = 0;  // the step just taken (0-based)
  double loss = 0;   // mean of the micro-batch losses, averaged over data-parallel ranks
  std::map<std::string, double> parts;  // e.g. mlm_loss, nsp_loss, averaged likewise
  double grad_norm = 0;                 // before clipping (of the unscaled gradients)
  double lr = 0;                        // of the first parameter group
  bool skipped = false;                 // non-finite gradients: no update (loss scaling)
  double loss_scale = 1;                // after the step's update
  int64_t samples = 0;                  // in the global batch
  int64_t targets = 0;                  // tokens or labels that counted, over the global batch
};

class TrainStep {
 public:
  TrainStep(models::Model& model, Optimizer& optimizer, const LrScheduler* schedule,
            TrainStepOptions options, ParallelGroups groups = {});
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // micro_batches: this rank's num_accumulation_steps micro-batches, under the model's input
  // names plus the labels its loss needs (train/loss.h), each of the same batch size.
  StepResult run(const std::vector<models::TensorMap>& micro_batches);

  int64_t steps_done() const { return step_; }
  void set_steps_done(int64_t step) { step_ = step; }  // resuming
  GradScaler* scaler() { return scaler_ ? scaler_.get() : nullptr; }

 private:
  struct Reducer;
  models::Model& model_;
  Optimizer& optimizer_;
  const LrScheduler* schedule_;
  TrainStepOptions options_;
  ParallelGroups groups_;
  std::vector<models::ParameterInfo> params_;
  std::unique_ptr<GradScaler> scaler_;
  std::unique_ptr<Reducer> reducer_;
  int64_t step_ = 0;
};

}  // namespace libai::train
