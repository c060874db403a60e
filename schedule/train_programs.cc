#include "schedule/train_programs.h"

#include "runtime/error.h"

namespace libai::schedule {

TrainPrograms train_programs(const std::string& schedule, int devices, int micro_batches, int chunks) {
  LIBAI_CHECK(devices >= 1 && micro_batches >= 1, "training schedule: ", devices, " stages, ",
              micro_batches, " micro-batches");
  if (schedule == "interleaved") {
    LIBAI_CHECK(chunks >= 1 && (chunks == 1 || micro_batches % devices == 0),
                "interleaved 1F1B: ", micro_batches, " micro-batches must be a multiple of ",
                devices, " devices (chunks ", chunks, ")");
    return {interleaved_one_f_one_b(devices, micro_batches, chunks), chunks};
  }
  LIBAI_CHECK(chunks == 1, "training schedule '", schedule, "' runs one chunk per stage, not ", chunks,
              " (interleaved runs several)");
  if (schedule == "gpipe") return {gpipe(devices, micro_batches), 1};
  if (schedule == "1f1b") return {one_f_one_b(devices, micro_batches), 1};
  LIBAI_THROW(InvalidArgument, "training schedule '", schedule,
              "': expected gpipe, 1f1b or interleaved");
}

}  // namespace libai::schedule
