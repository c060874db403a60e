// The eager SPMD pipeline: every rank (data-parallel replica x pipeline stage x tensor rank)
// runs its device's schedule::StageProgram in order on its own thread or process, calling
// train::StageStep for each action and moving activations and their gradients with blocking
// point-to-point messages of the runtime communicators. No actors: this is the reference the
// actor runtime's training plans are tested against (docs/DESIGN.md, Note [Training through stage
// actors]; docs/TRAINING.md, "Pipeline parallelism").
//
//   comm::DeviceMesh mesh{.dp = 2, .pp = 2, .tp = 1};
//   // on every rank of `world` (run_spmd_threads):
//   train::PipelineRankSetup setup = train::make_pipeline_rank(*world, mesh);  // collective
//   auto specs = train::virtual_stage_parts(num_layers, mesh.pp * v);
//   // parts[c] = create_model(config, {.tp = setup.groups.tp}, specs[c * pp + stage]) ...
//   train::StageStep step(parts, *optimizer, &schedule, options, layout, setup.groups);
//   train::EagerPipelineRank rank(step, program[stage], layout, setup.groups.pp);
//   StepResult r = rank.run(micro_batches);   // this replica's micro-batches; same r everywhere
//
// Messages: forward sends what StageStep::forward returned (a TensorMap: a header of names,
// dtypes and shapes, then each tensor) from virtual stage k to k + 1 (device (k + 1) mod pp);
// backward sends the received tensors' gradients from k to k - 1. Each message's tag names
// its direction, the receiving virtual stage and the micro-batch, so a receive matches
// exactly one send whatever the two programs' interleaving.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/mesh.h"
#include "schedule/program.h"
#include "train/stage_step.h"

namespace libai::train {

struct PipelineRankSetup {
  StageGroups groups;  // tp, dp, pp, tied (first and last stage's ranks), world
  comm::MeshCoordinates coordinates;
};

// Collective over `world` (every rank calls it, in the same order as its other calls).
PipelineRankSetup make_pipeline_rank(std::shared_ptr<comm::Communicator> world,
                                     const comm::DeviceMesh& mesh);

// The parts of `num_virtual_stages` virtual stages over num_layers layers: contiguous, as
// even as possible, earlier stages taking the remainder (the last holds the head).
// InvalidArgument when there are fewer layers than virtual stages.
std::vector<models::StageSpec> virtual_stage_parts(int num_layers, int num_virtual_stages);

// "gpipe", "1f1b" or "interleaved" (num_chunks virtual stages per device; 1f1b when 1):
// the programs of every device. InvalidArgument naming the schedule otherwise.
schedule::PipelineProgram pipeline_program(const std::string& schedule, int num_stages,
                                           int num_micro_batches, int num_chunks);

class EagerPipelineRank {
 public:
  // pp: this slot on every stage (rank s is stage s), for the sends and receives; null when
  // layout.pp == 1.
  EagerPipelineRank(StageStep& step, schedule::StageProgram program, StageLayout layout,
                    std::shared_ptr<comm::Communicator> pp);
  // One optimizer step over this replica's micro-batches (num_accumulation_steps of them;
  // every stage's rank is given them: the first reads the inputs, the last the labels).
  StepResult run(const std::vector<models::TensorMap>& micro_batches);

 private:
  StageStep& step_;
  schedule::StageProgram program_;
  StageLayout layout_;
  std::shared_ptr<comm::Communicator> pp_;
};

// Validation through the pipeline, forward only (no gradients): every rank calls it with its
// chunks' parts and the same validation micro-batches (its replica's). On the last stage's
// ranks: the summed loss over the micro-batches and, for classification heads, correct / seen
// predictions; zeros elsewhere.
struct PipelineEvalSums {
  double loss = 0, correct = 0, seen = 0;
  int64_t batches = 0;
};
PipelineEvalSums evaluate_pipeline(const std::vector<models::Model*>& parts, StageLayout layout,
                                   const std::shared_ptr<comm::Communicator>& pp,
                                   const std::vector<models::TensorMap>& batches);

// Point to point of a TensorMap (header, then the tensors in name order), for the pipeline.
void send_tensor_map(comm::Communicator& comm, const models::TensorMap& map, int peer, uint32_t tag,
                     std::vector<comm::WorkHandle>& pending);
models::TensorMap recv_tensor_map(comm::Communicator& comm, int peer, uint32_t tag);

}  // namespace libai::train
