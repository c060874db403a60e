#include "train/train_step.h"

#include <cmath>

#include "models/parallel/data_parallel.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/logging.h"
#include "train/grad_clip.h"

namespace libai::train {

struct TrainStep::Reducer {
  models::GradientReducer reducer;
  Reducer(models::Module& m, std::shared_ptr<comm::Communicator> dp, int64_t bucket_bytes)
      : reducer(m, std::move(dp), {.bucket_bytes = bucket_bytes, .average = true}) {}
};

namespace {

int64_t batch_size_of(const models::TensorMap& batch) {
  for (const char* key : {"input_ids", "pixel_values", "inputs_embeds"}) {
    auto it = batch.find(key);
    if (it != batch.end() && it->second.dim() >= 1) return it->second.size(0);
  }
  LIBAI_CHECK(!batch.empty() && batch.begin()->second.dim() >= 1,
              "train step: a micro-batch has no input_ids or pixel_values to take its size from");
  return batch.begin()->second.size(0);
}

double all_reduce_mean(double value, const std::shared_ptr<comm::Communicator>& dp) {
  if (!dp || dp->size() == 1) return value;
  Tensor t = Tensor::full({1}, value, DType::f64);
  dp->all_reduce(t);
  return t.data<double>()[0] / dp->size();
}

}  // namespace

TrainStep::TrainStep(models::Model& model, Optimizer& optimizer, const LrScheduler* schedule,
                     TrainStepOptions options, ParallelGroups groups)
    : model_(model),
      optimizer_(optimizer),
      schedule_(schedule),
      options_(std::move(options)),
      groups_(std::move(groups)) {
  LIBAI_CHECK(options_.num_accumulation_steps >= 1,
              "train step: num_accumulation_steps must be >= 1, got ",
              options_.num_accumulation_steps);
  LIBAI_CHECK(!options_.clip_grad_max_norm || *options_.clip_grad_max_norm > 0,
              "train step: clip_grad_max_norm must be > 0 (or null for no clipping), got ",
              *options_.clip_grad_max_norm);
  params_ = model_.parameter_infos();
  // Frozen parameters stay frozen; the optimizer's groups were built from those that train.
  bool any = false;
  for (const auto& info : params_) any |= info.tensor->requires_grad();
  size_t optimized = 0;
  for (const auto& group : optimizer_.groups()) optimized += group.params.size();
  LIBAI_CHECK(
      any && optimized > 0, "train step: ",
      any ? "the optimizer holds no parameter" : "no parameter of the model requires a gradient",
      ": call model.set_requires_grad(true) before building the optimizer's parameter groups");
  if (options_.loss_scale) scaler_ = std::make_unique<GradScaler>(*options_.loss_scale);
  if (groups_.dp && groups_.dp->size() > 1)
    reducer_ = std::make_unique<Reducer>(model_, groups_.dp, options_.bucket_bytes);
}

TrainStep::~TrainStep() = default;

StepResult TrainStep::run(const std::vector<models::TensorMap>& micro_batches) {
  const int64_t accumulation = options_.num_accumulation_steps;
  LIBAI_CHECK(int64_t(micro_batches.size()) == accumulation, "train step: got ",
              micro_batches.size(), " micro-batches for num_accumulation_steps ", accumulation);
  const int64_t micro = batch_size_of(micro_batches[0]);
  const int dp = groups_.dp ? groups_.dp->size() : 1;
  const int dp_rank = groups_.dp ? groups_.dp->rank() : 0;
  const int64_t global = micro * accumulation * dp;

  StepResult result;
  result.step = step_;
  result.samples = global;
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  double loss_sum = 0;
  std::map<std::string, double> part_sums;
  int64_t targets = 0;
  optimizer_.zero_grad();
  for (int64_t k = 0; k < accumulation; ++k) {
    const models::TensorMap& batch = micro_batches[size_t(k)];
    LIBAI_CHECK(batch_size_of(batch) == micro, "train step: micro-batch ", k, " has ",
                batch_size_of(batch), " samples, micro-batch 0 has ", micro);
    if (reducer_) reducer_->reducer.set_enabled(k == accumulation - 1);
    models::TrainingMode mode;
    mode.training = options_.dropout;
    mode.seed = options_.seed;
    mode.step = uint64_t(step_);
    mode.sample_offset = step_ * global + (k * dp + dp_rank) * micro;  // Note [Micro-batch order]
    mode.activation_checkpoint = options_.activation_checkpoint;
    mode.autocast = options_.autocast;
    models::TrainingModeGuard guard(mode);
    LossOutput out = compute_loss(model_, batch, options_.loss);
    loss_sum += out.loss.item<double>();
    for (const auto& [name, value] : out.parts) part_sums[name] += value.item<double>();
    targets += out.targets;
    autograd::backward(ops::scale(out.loss, loss_scale / double(accumulation)));
  }
  if (reducer_) reducer_->reducer.finish();

  result.loss = all_reduce_mean(loss_sum / double(accumulation), groups_.dp);
  for (const auto& [name, sum] : part_sums)
    result.parts[name] = all_reduce_mean(sum / double(accumulation), groups_.dp);
  result.targets = int64_t(std::llround(all_reduce_mean(double(targets), groups_.dp) * dp));

  bool finite = true;
  if (scaler_) {
    std::vector<std::shared_ptr<comm::Communicator>> agree{groups_.tp, groups_.dp};
    finite = scaler_->unscale(params_, agree);
  }
  const NormGroups norm_groups{.tp = groups_.tp};
  result.grad_norm = options_.clip_grad_max_norm
                         ? clip_grad_norm(params_, *options_.clip_grad_max_norm,
                                          options_.clip_grad_norm_type, norm_groups)
                         : global_grad_norm(params_, options_.clip_grad_norm_type, norm_groups);
  if (!scaler_ && !std::isfinite(result.grad_norm))
    LIBAI_THROW(InvalidArgument, "train step ", step_, ": the gradient norm is ", result.grad_norm,
                " (loss ", result.loss,
                "); without loss scaling a non-finite gradient is an error");

  for (auto& group : optimizer_.groups())
    group.lr = schedule_ ? schedule_->lr(group.base_lr, step_) : group.base_lr;
  result.lr = optimizer_.groups().empty() ? 0.0 : optimizer_.groups()[0].lr;
  if (finite) {
    optimizer_.step();
  } else {
    result.skipped = true;
    logger("train")->warn("step {}: gradients hold inf or nan at loss scale {}; step skipped",
                          step_, loss_scale);
  }
  if (scaler_) {
    scaler_->update(!finite);
    result.loss_scale = scaler_->scale();
  }
  optimizer_.zero_grad();
  ++step_;
  return result;
}

}  // namespace libai::train
