// Training programs by name, for the actor runtime's synthetic training jobs and tests:
// schedule::gpipe and schedule::one_f_one_b, and interleaved 1F1B.
//
//   TrainPrograms p = train_programs("1f1b", /*devices=*/4, /*micro_batches=*/8);
//   TrainPrograms q = train_programs("interleaved", 4, 8, /*chunks=*/2);
//
// interleaved_programs() is a local stand-in until schedule/ has interleaved 1F1B: Megatron's
// order (micro-batches in rounds of `devices`; device d warms up with 2 (devices - d - 1) +
// (chunks - 1) devices forwards, then alternates one forward and one backward, then drains).
#pragma once

#include <string>

#include "actors/train_pipeline.h"

namespace libai::actors {

// Needs micro_batches to be a multiple of devices.
schedule::PipelineProgram interleaved_programs(int devices, int micro_batches, int chunks);

// `schedule`: gpipe, 1f1b or interleaved (chunks > 1 only for interleaved). InvalidArgument
// for another name or sizes that do not fit.
TrainPrograms train_programs(const std::string& schedule, int devices, int micro_batches, int chunks = 1);

}  // namespace libai::actors
