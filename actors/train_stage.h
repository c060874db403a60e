// What a training stage computes: the interface between the actor runtime, which runs a
// stage's training program (actors/train_stage_actor.h), and the model code that does the
// work (train/ for real models, actors/synthetic_train.h for the runtime's own tests).
//
//   class MyStage : public TrainStageCompute {
//     models::TensorMap forward(int step, int chunk, int micro_batch, const models::TensorMap& in) override;
//     models::TensorMap backward(int step, int chunk, int micro_batch, const models::TensorMap& grads) override;
//     StepSummary end_step(int step) override;   // optimizer step; losses and norm for the driver
//   };
//
// Every call runs on the stage's pinned thread, one at a time, in the order of the stage's
// program (schedule::StageProgram): for each micro-batch, forward before backward; end_step
// after the step's last action.
#pragma once

#include "actors/wire/wire.h"
#include "models/model.h"

namespace libai::actors {

// A stage's report after a step; crosses processes as Cap'n Proto (wire::encode).
using StepSummary = wire::StepSummary;

// What a training stage computes (one model chunk per virtual stage). Runs on the stage's pinned thread only.
class TrainStageCompute {
 public:
  virtual ~TrainStageCompute() = default;
  // Forward of micro-batch `micro_batch` of training step `step` on model chunk `chunk`.
  // inputs: the previous (virtual) stage's outputs; EMPTY on the first virtual stage, which
  // reads its micro-batch itself (every node has the data). Returns the outputs for the next
  // virtual stage (ignored on the last one, which keeps its loss). Stashes what backward needs.
  virtual models::TensorMap forward(int step, int chunk, int micro_batch, const models::TensorMap& inputs) = 0;
  // Backward: output_grads are the gradients of this chunk's outputs from the next virtual
  // stage (EMPTY on the last virtual stage, which starts from its loss). Returns the gradients
  // of its inputs for the previous virtual stage (ignored on the first).
  virtual models::TensorMap backward(int step, int chunk, int micro_batch, const models::TensorMap& output_grads) = 0;
  // After the device's last action of the step: reductions, clipping, optimizer step (may run
  // blocking collectives with the other stages). Returns a small report for the driver.
  virtual StepSummary end_step(int step) = 0;
  // Between steps, on every stage at once (Note [Train controls] in train_stage_actor.h):
  // save or load a checkpoint, evaluate. Returns a report for the driver (a load: the
  // checkpoint's progress, an evaluation: its metrics, in `extra`). Stages that cannot take
  // controls keep this default, which refuses.
  virtual StepSummary control(const wire::TrainControl& command);
};

}  // namespace libai::actors
