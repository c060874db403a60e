// One rank of a pipeline stage training its model parts (models/model.h, Note [Model parts]):
// the per-micro-batch forward and backward actions a pipeline program runs (schedule/
// program.h) and the end of the step. Nothing here knows actors or threads: the stage actors
// (actors/train_stage.h) call it on their pinned threads, and the eager SPMD loop (one thread
// per rank, blocking sends) calls it in the same program order. docs/TRAINING.md, "Pipeline
// parallelism"; docs/DESIGN.md, Note [Training through stage actors].
//
//   train::StageStep step(parts, *optimizer, &schedule, options, layout, groups);
//   // in program order, for the micro-batches of step k:
//   TensorMap sent = step.forward(chunk, mb, batch_of(mb), received);    // to the next stage
//   TensorMap grads = step.backward(chunk, mb, grads_from_next_stage);  // to the previous one
//   StepResult r = step.end_step();          // after the stage's last action of the step
//
// Which part is which: `parts[c]` is chunk c of this device: virtual stage c * pp + stage
// (one chunk unless the schedule is interleaved). The first virtual stage reads its inputs
// from `batch`; every other one receives "hidden_states" (and side tensors) from the one
// before. The last virtual stage computes the loss with train::compute_loss on its part, fed
// `batch` merged with what it received (the labels come from `batch`: every stage's rank has
// the micro-batch, as every node runs the same data loader).
//
// Numerics are those of train::TrainStep on one device (the reference every layout is tested
// against): micro-batch k of data-parallel rank r holds global samples [(k dp + r) micro,
// ...) (Note [Micro-batch order]) and dropout is keyed by them; each micro-batch's loss is
// scaled by loss_scale / num_accumulation_steps before its backward; gradients accumulate
// over the step's micro-batches; end_step() then
//   1. sums the gradients of weights tied across stages (GPT-2's token embedding on the first
//      and last stage) over `groups.tied`, as Megatron does, so both copies step alike;
//   2. averages gradients over `groups.dp` (buckets reduced during the last micro-batch's
//      backward, models::GradientReducer);
//   3. agrees on non-finite gradients (loss scaling) over `groups.world`;
//   4. computes the global gradient norm over every stage and rank (each element counted
//      once: a tied weight on one of its stages only, Note [Each element counted once]) and
//      clips by it;
//   5. sets the learning rate and steps the optimizer over this rank's parameters.
// The step's loss (mean over the micro-batches and data-parallel replicas) is known on the
// last stage; end_step() shares it over `groups.world` so every rank returns the same result.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "models/model.h"
#include "runtime/comm/communicator.h"
#include "train/optimizer.h"
#include "train/train_step.h"
#include "train/zero.h"

namespace libai::train {

// Where this rank sits in the job.
struct StageLayout {
  int pp = 1, stage = 0;    // pipeline stages (devices along the pipeline) and this one
  int num_chunks = 1;       // model chunks per device (interleaved schedules)
  int dp = 1, dp_rank = 0;  // data-parallel replicas and this one's index
  int64_t micro_batch_size = 0;
};

// The communicators of one rank (null: a group of one).
struct StageGroups {
  std::shared_ptr<comm::Communicator> tp;     // this stage's tensor-parallel ranks
  std::shared_ptr<comm::Communicator> dp;     // this slot in every replica
  std::shared_ptr<comm::Communicator> tied;   // first and last stage, same replica and tp rank
  std::shared_ptr<comm::Communicator> world;  // every rank of the job
  // This slot (replica, tp rank) on every stage, in stage order: the gradient norm sums over
  // it (Note [Each element counted once]). Required when pp > 1.
  std::shared_ptr<comm::Communicator> pp;
};

// The optimizer's parameter groups over a rank's parts (default_param_groups per part,
// Note [Parameter groups as LiBai forms them]): an override applies on the parts holding a
// parameter it names, and must name one on some part; groups of equal hyper-parameters merge.
std::vector<ParamGroup> stage_param_groups(const std::vector<models::Model*>& parts,
                                           const ParamGroupOptions& options);

class StageStep {
 public:
  // parts: this device's chunks, built for their virtual stages, parameters requiring grad;
  // the optimizer holds exactly their trainable parameters.
  StageStep(std::vector<models::Model*> parts, Optimizer& optimizer, const LrScheduler* schedule,
            TrainStepOptions options, StageLayout layout, StageGroups groups);
  ~StageStep();
  StageStep(const StageStep&) = delete;
  StageStep& operator=(const StageStep&) = delete;

  // Forward of micro-batch `mb` (0 <= mb < num_accumulation_steps) on chunk `chunk`.
  // `received`: the previous virtual stage's outputs (empty on the first virtual stage).
  // Returns what the next virtual stage receives, detached (empty on the last, which keeps
  // its loss). Stashes what backward needs until backward(chunk, mb).
  models::TensorMap forward(int chunk, int mb, const models::TensorMap& batch,
                            const models::TensorMap& received);
  // Backward of micro-batch `mb` on chunk `chunk`: `output_grads` are the gradients of the
  // tensors forward() returned (empty on the last virtual stage, which starts from its
  // loss). Returns the gradients of `received`'s floating tensors for the previous virtual
  // stage (empty on the first).
  models::TensorMap backward(int chunk, int mb, const models::TensorMap& output_grads);
  // After every forward and backward of the step: the collectives above and the update.
  StepResult end_step();

  int64_t steps_done() const;
  void set_steps_done(int64_t step);  // resuming
  GradScaler* scaler();

  // The optimizer's step count (ZeRO's shard optimizer when it has one).
  int64_t optimizer_steps() const;
  // ZeRO's shards when TrainStepOptions::zero_stage > 0, else null.
  ZeroShards* zero();
  // What this rank writes into a sharded checkpoint (train/checkpoint/sharded.h): ZeRO's
  // owned slices; without ZeRO, dp rank 0's whole tensor-parallel blocks of its parts with
  // their optimizer state (nothing on other replicas). A weight tied across stages is written
  // by the first stage only. Stage 3: call between zero()->fetch_all() / release_all().
  std::vector<OwnedSlice> owned_slices();
  // Sets this rank's parameters and optimizer state from a checkpoint of any layout:
  // `parameter(name)` is this rank's tp block of a parameter (the Module's shape), `state(name,
  // key)` the block of its optimizer state ("exp_avg", "exp_avg_sq", "momentum_buffer"; a
  // scalar for "step"), undefined when absent. optimizer_steps: the optimizer's step count.
  void load_state(const ZeroShards::BlockSource& parameter, const ZeroShards::StateSource& state,
                  int64_t optimizer_steps);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace libai::train
