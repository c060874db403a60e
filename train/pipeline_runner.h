// The trainer's runner for pipeline parallelism in eager mode (graph.enabled false): one rank
// of train.dist.data_parallel_size x pipeline_parallel_size x tensor_parallel_size, all ranks
// threads of this process (train/step_runner.h; docs/TRAINING.md, "Pipeline parallelism").
#pragma once

#include <memory>

#include "runtime/comm/mesh.h"
#include "train/step_runner.h"

namespace libai::train {

// What the ranks of one process share: the checkpoint being merged from every stage.
struct PipelineProcessState;
std::shared_ptr<PipelineProcessState> make_pipeline_process_state();

// Collective over `world` (make_pipeline_rank): builds this rank's model parts (layers cut
// evenly over pp x virtual_pipeline_size virtual stages), its optimizer over them, its
// StageStep and program (train.dist.pipeline_schedule).
std::unique_ptr<StepRunner> make_pipeline_runner(const config::Config& cfg, const TrainConfig& t,
                                                 std::shared_ptr<comm::Communicator> world,
                                                 const comm::DeviceMesh& mesh,
                                                 std::shared_ptr<PipelineProcessState> shared);

}  // namespace libai::train
