#include "actors/train_programs.h"

#include <algorithm>

#include "runtime/error.h"

namespace libai::actors {

schedule::PipelineProgram interleaved_programs(int devices, int micro_batches, int chunks) {
  LIBAI_CHECK(devices >= 1 && chunks >= 1 && micro_batches >= 1 && micro_batches % devices == 0,
              "interleaved 1F1B: ", micro_batches, " micro-batches must be a positive multiple of ",
              devices, " devices (and chunks ", chunks, " at least 1)");
  const int total = micro_batches * chunks;
  // The k-th forward (backward) of every device: micro-batches in rounds of `devices`, each
  // round through every chunk (backward: the chunks in reverse).
  auto action = [&](schedule::ActionKind kind, int k) {
    const int round = k / (devices * chunks), chunk_in_round = (k / devices) % chunks;
    const int chunk = kind == schedule::ActionKind::forward ? chunk_in_round : chunks - 1 - chunk_in_round;
    return schedule::Action{kind, round * devices + k % devices, 0, chunk};
  };
  schedule::PipelineProgram programs(static_cast<size_t>(devices));
  for (int d = 0; d < devices; ++d) {
    auto& program = programs[size_t(d)];
    const int warmup = std::min(total, chunks == 1 ? devices - d - 1
                                                   : 2 * (devices - d - 1) + (chunks - 1) * devices);
    int f = 0, b = 0;
    while (f < warmup) program.push_back(action(schedule::ActionKind::forward, f++));
    while (f < total) {
      program.push_back(action(schedule::ActionKind::forward, f++));
      program.push_back(action(schedule::ActionKind::backward, b++));
    }
    while (b < total) program.push_back(action(schedule::ActionKind::backward, b++));
  }
  return programs;
}

TrainPrograms train_programs(const std::string& schedule, int devices, int micro_batches, int chunks) {
  LIBAI_CHECK(devices >= 1 && micro_batches >= 1, "training schedule: ", devices, " stages, ",
              micro_batches, " micro-batches");
  if (schedule == "interleaved") return {interleaved_programs(devices, micro_batches, chunks), chunks};
  LIBAI_CHECK(chunks == 1, "training schedule '", schedule, "' runs one chunk per stage, not ", chunks,
              " (interleaved runs several)");
  if (schedule == "gpipe") return {schedule::gpipe(devices, micro_batches), 1};
  if (schedule == "1f1b") return {schedule::one_f_one_b(devices, micro_batches), 1};
  LIBAI_THROW(InvalidArgument, "training schedule '", schedule,
              "': expected gpipe, 1f1b or interleaved");
}

}  // namespace libai::actors
