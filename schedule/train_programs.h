// Training programs by name, for the planner, the actor runtime's training jobs and tests:
// gpipe, one_f_one_b and interleaved_one_f_one_b (schedule/program.h).
//
//   TrainPrograms p = train_programs("1f1b", /*devices=*/4, /*micro_batches=*/8);
//   TrainPrograms q = train_programs("interleaved", 4, 8, /*chunks=*/2);
#pragma once

#include <string>

#include "schedule/program.h"

namespace libai::schedule {

// One step's program per pipeline device (all replicas and ranks run their device's).
struct TrainPrograms {
  PipelineProgram programs;  // [device]
  int chunks = 1;            // model chunks per device (virtual stages: chunks x pp)
};

// `schedule`: gpipe, 1f1b or interleaved (chunks > 1 only for interleaved). InvalidArgument
// for another name or sizes that do not fit.
TrainPrograms train_programs(const std::string& schedule, int devices, int micro_batches, int chunks = 1);

}  // namespace libai::schedule
