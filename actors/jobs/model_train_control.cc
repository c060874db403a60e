// ModelTrainCompute's controls between steps (Note [Train controls] in train_stage_actor.h):
// sharded checkpoints that every runner reads, and evaluation through the stages.
//
// Note [Graph-mode checkpoints]
// A save runs on every slot at once and is a collective of the world communicator
// (train::save_sharded_checkpoint, Note [Sharded checkpoint layout]): each slot writes what it
// owns, StageStep::owned_slices (ZeRO's owned ranges, or replica 0's whole tensor-parallel
// blocks; ZeRO-3 gathers its units around it), into its own shard file, and world rank 0 (slot
// 0) writes layout.json, config.json and trainer.json and publishes the folder atomically.
// Nothing crosses the network but a few numbers, and no rank holds more than its own state.
// model_final and model_best (names that are not model_NNNNNNN) also get model.safetensors,
// the whole parameters assembled from the shards, so `generate`, `convert` and
// models::load_model read them as a model folder.
// A load: every slot opens the folder through train::CheckpointReader (either format, any
// layout it was saved at), takes its parts' tensor-parallel blocks and their optimizer state
// (StageStep::load_state: ZeRO's shards cut from them) and sets its step count; the folder
// must be visible from every node (a shared file system, or copied there). Slot 0 answers
// with the checkpoint's progress.
#include "actors/jobs/model_train.h"

#include <memory>

#include "runtime/error.h"
#include "train/checkpoint/gathered.h"
#include "train/checkpoint/sharded.h"
#include "train/pipeline_eager.h"
#include "train/step_runner.h"

namespace libai::actors {

namespace {


}  // namespace

std::vector<models::Model*> ModelTrainCompute::raw_parts() const {
  std::vector<models::Model*> out;
  for (const auto& part : parts_) out.push_back(part.get());
  return out;
}

StepSummary ModelTrainCompute::save(const wire::TrainControl& command) {
  train::StageStep& step = stage_step();  // the groups exist from here
  const train::StageLayout& layout = options_.layout;
  train::ZeroShards* zero = step.zero();
  const int zero_stage = zero ? zero->stage() : 0;
  // Stage 3's units whole until the slices are written, freed again however the save ends.
  const train::WholeParameters whole(zero);
  const std::vector<train::OwnedSlice> slices = step.owned_slices();
  const train::TrainingProgress progress{.iteration = command.iteration,
                                         .consumed_samples = command.consumed_samples,
                                         .best_metric = command.best_metric,
                                         .has_best = command.has_best,
                                         .seed = command.seed};
  const train::ShardedLayout saved{.dp = layout.dp,
                                   .tp = options_.tp ? options_.tp->size() : 1,
                                   .pp = layout.pp,
                                   .virtual_stages = layout.num_chunks,
                                   .zero_stage = zero_stage};
  train::save_sharded_checkpoint(command.folder, command.name, slices, groups_.world.get(), saved,
                                 *parts_[0], *optimizer_, step.optimizer_steps(), step.scaler(),
                                 progress, command.max_to_keep, {.schedule = &schedule_},
                                 /*whole_weights=*/!train::is_numbered_checkpoint(command.name));
  return {};
}

StepSummary ModelTrainCompute::load(const wire::TrainControl& command) {
  train::StageStep& step = stage_step();
  const train::TrainingProgress progress = train::load_stage_checkpoint(
      train::CheckpointReader::open(command.folder), raw_parts(), step);
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
  // ZeRO-3: evaluation's forwards run without the step's fetching mode.
  const train::WholeParameters whole(step.zero());
  const train::PipelineEvalSums sums =
      train::evaluate_pipeline(raw_parts(), layout, groups_.pp, batches);
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
