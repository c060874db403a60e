// Real models training through the training stage actors (actors/train_stage.h): one slot's
// model chunks, its optimizer and LR schedule, and a train::StageStep that runs the forward
// and backward actions its program fires and the end of each step. docs/TRAINING.md,
// "Training on the actor runtime"; docs/DESIGN.md, Note [Training through stage actors].
//
//   ModelTrainOptions o{.model_config = hf, .train = t, .parts = {spec_of_chunk0},
//                       .layout = {.pp = 2, .stage = 1, .dp = 1, .micro_batch_size = 2},
//                       .groups = [=] { return groups_of_this_slot; }, .data = source,
//                       .reports_loss = true};
//   auto compute = std::make_shared<ModelTrainCompute>(std::move(o));
//   // ... a LocalTrainPipeline (or the cluster) runs its program; the driver's summary of
//   // step k: loss_sum / loss_count = the step's loss, grad_norm, extra["lr"], ...
//
// Data: every slot reads its own micro-batches (every node has the data): micro-batch k of
// replica r in step s is `data(s, r, k)` (Note [Micro-batch order] in train/train_step.h),
// read once per (step, micro-batch) and shared by the slot's chunks.
// Losses: StageStep shares the step's loss (mean over micro-batches and replicas) with every
// rank; merge_summaries sums over slots, so only the last stage's tp rank 0 of each replica
// reports it (loss_sum = loss, loss_count = 1): the driver's mean is the step's loss.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/train_pipeline.h"
#include "train/lr_scheduler.h"
#include "train/stage_step.h"
#include "train/train_config.h"

namespace libai::actors {

// Micro-batch `micro_batch` of data-parallel replica `replica` in training step `step`.
using MicroBatchSource =
    std::function<models::TensorMap(int64_t step, int replica, int micro_batch)>;

// Virtual stage v of `virtual_stages` over `num_layers` layers: schedule::uniform_partition's
// split (earlier stages get the remainder).
models::StageSpec uniform_virtual_stage(int num_layers, int virtual_stages, int v);

struct ModelTrainOptions {
  models::HfConfig model_config;
  std::filesystem::path weights;  // a model folder to fine-tune; empty: initialise (train.step.seed)
  train::TrainConfig train;       // optimizer, LR schedule (max_iter set), step options
  std::vector<models::StageSpec> parts;  // per chunk: virtual stage c * pp + stage
  train::StageLayout layout;
  std::shared_ptr<comm::Communicator> tp;  // this stage's tensor-parallel ranks (null: one)
  // dp, tied, pp and world (tp is taken from `tp`): called once, on a thread of the slot's
  // own, as the slot is built; may block while the groups form.
  std::function<train::StageGroups()> groups;
  MicroBatchSource data;
  bool reports_loss = false;  // the last stage's tp rank 0 of its replica
  // Called with the error before an action's exception leaves (breaks the groups, so the
  // other slots wake instead of waiting for the collectives' timeout).
  std::function<void(const std::string&)> on_error;
  // Controls (Note [Graph-mode checkpoints] in model_train_control.cc). The world ranks of
  // replica 0's tp rank 0 on every stage, by stage: they send their parts' whole tensors to
  // world rank 0, which writes the checkpoint.
  std::vector<int> stage_roots;
  // This replica's validation micro-batches (null: the run has no validation data).
  std::function<std::vector<models::TensorMap>(int replica)> validation;
};

class ModelTrainCompute : public TrainStageCompute {
 public:
  explicit ModelTrainCompute(ModelTrainOptions options);
  ~ModelTrainCompute() override;

  models::TensorMap forward(int step, int chunk, int micro_batch, const models::TensorMap& inputs) override;
  models::TensorMap backward(int step, int chunk, int micro_batch, const models::TensorMap& output_grads) override;
  // extra: lr, loss_scale, samples, targets (global), skipped as 0/1, and the loss's parts.
  StepSummary end_step(int step) override;
  // Save, load (this slot's parts and their optimizer state) and evaluate:
  // model_train_control.cc.
  StepSummary control(const wire::TrainControl& command) override;

  // Checkpoints (on the stage's thread or while it is idle).
  const std::vector<std::unique_ptr<models::Model>>& parts() const { return parts_; }
  train::Optimizer& optimizer() { return *optimizer_; }
  train::StageStep& stage_step();
  const train::LrScheduler& schedule() const { return schedule_; }

 private:
  const models::TensorMap& batch(int step, int micro_batch);
  template <typename F>
  auto guarded(const char* what, F&& body);
  StepSummary save(const wire::TrainControl& command);
  StepSummary load(const wire::TrainControl& command);
  StepSummary evaluate();
  std::vector<models::Model*> raw_parts() const;

  ModelTrainOptions options_;
  std::vector<std::unique_ptr<models::Model>> parts_;
  std::unique_ptr<train::Optimizer> optimizer_;
  train::LrScheduler schedule_;
  std::future<std::unique_ptr<train::StageStep>> pending_step_;
  std::unique_ptr<train::StageStep> step_;
  train::StageGroups groups_;  // set with the StageStep (read after stage_step())
  int64_t steps_before_ = -1;  // resuming: set_steps_done before the StageStep exists
  std::map<std::pair<int, int>, models::TensorMap> batches_;  // (step, micro-batch)
};

// Which slots form each group of a training layout with `chunks` chunks per device, by slot
// index (PipelineLayout::index): tp (the ranks of a stage), dp (a slot in every replica),
// tied (the first and last device of a replica, same tp rank; none when pp == 1), pp (a
// replica's slots of one tp rank on every stage).
struct TrainGroupMembers {
  std::vector<std::vector<int>> tp, dp, tied, pp;  // each group's slots, sorted
  int world = 0;
};
TrainGroupMembers train_group_members(const PipelineLayout& layout);

// Every slot's groups when all run in this process: LocalGroups (index: slot).
std::vector<train::StageGroups> local_train_groups(const PipelineLayout& layout,
                                                   std::chrono::milliseconds timeout);

// Breaks every local group of `groups` (LocalGroup::abort) with `reason`.
void abort_local_groups(const train::StageGroups& groups, const std::string& reason);

// Note [Slot communicators across processes]
// When the slots span node processes, each slot of this node gets tensor parallelism from a
// LocalGroup of its node (tp stays inside a node) and its world, dp and tied groups from a
// UCX communicator of its own, one rank per slot of the job (rank = slot index). One per slot,
// not the node's data plane: a UCX world runs its collectives in call order, and two slots of
// one node reduce over different groups in orders that differ between nodes, which one shared
// queue would deadlock. Slot 0 (on whichever node the plan put it) listens on a free port, which
// its node broadcasts over the nodes' data plane; every slot then forms its communicator and subgroups on a thread of its own, so
// the result is a future the slot waits for before its first action.
struct ClusterSlotGroups {
  std::map<int, std::shared_ptr<comm::Communicator>> tp;  // this node's slots
  std::map<int, std::shared_future<train::StageGroups>> rest;
};
ClusterSlotGroups cluster_train_groups(const PipelineLayout& layout, int node,
                                       comm::Communicator& data_plane, const std::string& addr,
                                       std::chrono::milliseconds timeout);

}  // namespace libai::actors
