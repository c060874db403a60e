// ModelTrainCompute's controls between steps (Note [Train controls] in train_stage_actor.h):
// checkpoints in the whole-model format every runner writes, and evaluation through the
// stages.
//
// Note [Graph-mode checkpoints]
// A save runs on every slot at once. Each slot gathers its chunks' parameters and optimizer
// state over its tensor-parallel group (gather_checkpoint_tensors, a collective of the group);
// tp rank 0 of replica 0 on every stage then sends them to world rank 0 (replica 0's tp rank 0
// on stage 0) over the world communicator, which merges the stages' tensors (a weight tied
// across stages once, stage 0's copy) and writes the folder with write_checkpoint (Note
// [Checkpoint atomicity]) and the trainer's progress. The other slots' answers do not wait for
// the write; the driver's does, so the next step starts with the checkpoint complete.
// The folder is what the eager runners write (Note [Checkpoints of pipeline parts]), so it
// resumes in graph mode at this or another layout, or eagerly, and theirs resume here.
// A load: every slot reads its own parts' tensors and their optimizer state from the folder
// (load_checkpoint_parts) and sets its step count; the folder must be visible from every node
// (a shared file system, or copied there). Slot 0 answers with the checkpoint's progress.
#include "actors/model_train.h"

#include <set>

#include "runtime/error.h"
#include "train/checkpoint.h"
#include "train/pipeline_eager.h"
#include "train/step_runner.h"

namespace libai::actors {

namespace {

// Tags of the checkpoint messages on the world communicator: nothing else sends point to
// point there, and a save never overlaps a step.
constexpr uint32_t kCheckpointTag = 0x7c000000u;
uint32_t checkpoint_tag(int stage, bool state) {
  return kCheckpointTag | (uint32_t(stage) << 1) | (state ? 1u : 0u);
}

models::TensorMap to_map(const checkpoint::NamedTensors& named) {
  models::TensorMap out;
  for (const auto& [key, t] : named) out.emplace(key, t);
  return out;
}

}  // namespace

std::vector<models::Model*> ModelTrainCompute::raw_parts() const {
  std::vector<models::Model*> out;
  for (const auto& part : parts_) out.push_back(part.get());
  return out;
}

StepSummary ModelTrainCompute::save(const wire::TrainControl& command) {
  train::StageStep& step = stage_step();  // the groups exist from here
  const train::StageLayout& layout = options_.layout;
  const int world_rank = groups_.world ? groups_.world->rank() : 0;
  const int tp_rank = options_.tp ? options_.tp->rank() : 0;
  LIBAI_ASSERT(int(options_.stage_roots.size()) == layout.pp && options_.stage_roots[0] == 0,
               "graph-mode checkpoints: the stages' roots are not set");
  // ZeRO-3 keeps shards between uses: the whole parameters until the tensors are written.
  if (step.zero()) step.zero()->fetch_all();
  struct Release {
    train::ZeroShards* zero;
    ~Release() {
      if (zero) zero->release_all();
    }
  } release{step.zero()};
  train::CheckpointTensors mine =
      train::gather_checkpoint_tensors(raw_parts(), *optimizer_, options_.tp.get());
  if (layout.dp_rank != 0 || tp_rank != 0) return {};
  if (world_rank != 0) {
    std::vector<comm::WorkHandle> pending;
    train::send_tensor_map(*groups_.world, to_map(mine.weights), 0,
                           checkpoint_tag(layout.stage, false), pending);
    train::send_tensor_map(*groups_.world, to_map(mine.state), 0,
                           checkpoint_tag(layout.stage, true), pending);
    for (auto& w : pending) w->wait();
    return {};
  }
  // World rank 0: every stage's tensors, stage order, the first copy of a name kept.
  train::CheckpointTensors merged = std::move(mine);
  std::set<std::string> weights, state;
  for (const auto& [key, t] : merged.weights) weights.insert(key);
  for (const auto& [key, t] : merged.state) state.insert(key);
  for (int s = 1; s < layout.pp; ++s) {
    const int from = options_.stage_roots[size_t(s)];
    for (auto& [key, t] : train::recv_tensor_map(*groups_.world, from, checkpoint_tag(s, false)))
      if (weights.insert(key).second) merged.weights.emplace_back(key, t);
    for (auto& [key, t] : train::recv_tensor_map(*groups_.world, from, checkpoint_tag(s, true)))
      if (state.insert(key).second) merged.state.emplace_back(key, t);
  }
  const train::TrainingProgress progress{.iteration = command.iteration,
                                         .consumed_samples = command.consumed_samples,
                                         .best_metric = command.best_metric,
                                         .has_best = command.has_best,
                                         .seed = command.seed};
  train::write_checkpoint(command.folder, command.name, *parts_[0], std::move(merged), *optimizer_,
                          step.scaler(), progress, command.max_to_keep, {.schedule = &schedule_});
  return {};
}

StepSummary ModelTrainCompute::load(const wire::TrainControl& command) {
  train::StageStep& step = stage_step();
  const train::TrainingProgress progress = train::load_checkpoint_parts(
      command.folder, raw_parts(), *optimizer_, step.scaler(), /*whole=*/false);
  step.set_steps_done(progress.iteration);
  batches_.clear();
  StepSummary summary;
  summary.extra = {{"iteration", double(progress.iteration)},
                   {"consumed_samples", double(progress.consumed_samples)},
                   {"best_metric", progress.best_metric},
                   {"has_best", progress.has_best ? 1.0 : 0.0},
                   {"seed", double(progress.seed)}};
  return summary;
}

StepSummary ModelTrainCompute::evaluate() {
  LIBAI_CHECK(bool(options_.validation),
              "evaluation: this slot has no validation data (data.splits gives none, or its "
              "node was started without train.evaluation.enabled / --eval-only)");
  const train::StageLayout& layout = options_.layout;
  const std::vector<models::TensorMap> batches = options_.validation(layout.dp_rank);
  train::StageStep& step = stage_step();
  if (step.zero()) step.zero()->fetch_all();  // ZeRO-3: the layers' fetches need its mode
  const train::PipelineEvalSums sums =
      train::evaluate_pipeline(raw_parts(), layout, groups_.pp, batches);
  if (step.zero()) step.zero()->release_all();
  StepSummary summary;
  if (layout.stage != layout.pp - 1) return summary;
  // Every last-stage slot averages over the replicas (a collective of its dp group); one per
  // replica reports, so the driver's sums divided by the count are the metrics.
  auto metrics = train::eval_metrics(parts_.back()->task(), sums.loss, sums.batches, sums.correct,
                                     sums.seen, groups_.dp);
  if (options_.reports_loss) {
    summary.loss_count = 1;
    summary.extra = std::move(metrics);
  }
  return summary;
}

}  // namespace libai::actors
