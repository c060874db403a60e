// Training programs by name, for the actor runtime's training jobs and tests:
// schedule::gpipe, schedule::one_f_one_b and schedule::interleaved_one_f_one_b.
//
//   TrainPrograms p = train_programs("1f1b", /*devices=*/4, /*micro_batches=*/8);
//   TrainPrograms q = train_programs("interleaved", 4, 8, /*chunks=*/2);
#pragma once

#include <string>

#include "actors/train_pipeline.h"

namespace libai::actors {

// `schedule`: gpipe, 1f1b or interleaved (chunks > 1 only for interleaved). InvalidArgument
// for another name or sizes that do not fit.
TrainPrograms train_programs(const std::string& schedule, int devices, int micro_batches, int chunks = 1);

}  // namespace libai::actors
