// How a global batch divides: global_batch_size = train_micro_batch_size x
// num_accumulation_steps x data_parallel_size, with LiBai's rules for the ones left out
// (libai/engine/default.py, `_check_batch_size`):
//   micro and global given: accumulation = global / (micro x dp) (it must divide; a given
//                           accumulation must agree);
//   micro only:             accumulation defaults to 1, global = micro x accumulation x dp;
//   global only:            accumulation defaults to 1, micro = global / (accumulation x dp);
//   neither:                an error.
// A disagreement names the three values and the data-parallel size.
//
//   BatchConfig b = reconcile_batch({.micro = 8, .global = 64}, /*data_parallel_size=*/2);
//   b.accumulation;   // 4
#pragma once

#include <cstdint>
#include <optional>

namespace libai::train {

struct BatchSizes {
  std::optional<int64_t> micro;         // train.train_micro_batch_size
  std::optional<int64_t> global;        // train.global_batch_size
  std::optional<int64_t> accumulation;  // train.num_accumulation_steps
};

struct BatchConfig {
  int64_t micro = 1, global = 1, accumulation = 1, data_parallel = 1;
};

BatchConfig reconcile_batch(const BatchSizes& given, int64_t data_parallel_size);

}  // namespace libai::train
