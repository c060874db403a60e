#include "train/data/sampler.h"

#include <algorithm>

#include "runtime/error.h"
#include "train/data/numpy_random.h"

namespace libai::train::data {

Sampler::Sampler(int64_t dataset_size, SamplerOptions options)
    : size_(dataset_size), options_(options) {
  LIBAI_CHECK(size_ > 0, "sampler: the dataset is empty");
  LIBAI_CHECK(options_.micro_batch_size >= 1, "sampler: micro_batch_size ",
              options_.micro_batch_size, " should be >= 1");
  LIBAI_CHECK(options_.data_parallel_size >= 1, "sampler: data_parallel_size ",
              options_.data_parallel_size, " should be >= 1");
}

int64_t Sampler::index_at(int64_t position) const {
  LIBAI_CHECK(position >= 0, "sampler: negative position ", position);
  if (!options_.shuffle) return position % size_;
  const int64_t epoch = position / size_;
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoch != cached_epoch_) {
    NumpyRandomState rng(uint32_t(options_.seed + uint64_t(epoch)));
    permutation_ = rng.permutation(size_);
    cached_epoch_ = epoch;
  }
  return permutation_[size_t(position % size_)];
}

void Sampler::check_position(int64_t consumed_samples, int64_t dp_rank) const {
  LIBAI_CHECK(dp_rank >= 0 && dp_rank < options_.data_parallel_size, "sampler: dp rank ", dp_rank,
              " out of range [0, ", options_.data_parallel_size, ")");
  LIBAI_CHECK(consumed_samples >= 0 && consumed_samples % samples_per_micro_step() == 0,
              "sampler: consumed_samples ", consumed_samples,
              " is not a whole number of micro-steps of micro_batch_size x data_parallel_size = ",
              samples_per_micro_step());
}

std::vector<int64_t> CyclicSampler::micro_batch(int64_t consumed_samples, int64_t dp_rank) const {
  check_position(consumed_samples, dp_rank);
  const int64_t micro = options_.micro_batch_size;
  std::vector<int64_t> out(static_cast<size_t>(micro));
  const int64_t first = consumed_samples + dp_rank * micro;
  for (int64_t i = 0; i < micro; ++i) out[size_t(i)] = index_at(first + i);
  return out;
}

std::vector<int64_t> SingleRoundSampler::micro_batch(int64_t consumed_samples,
                                                     int64_t dp_rank) const {
  check_position(consumed_samples, dp_rank);
  if (drop_last_ && consumed_samples + samples_per_micro_step() > size_) return {};
  const int64_t micro = options_.micro_batch_size;
  const int64_t first = consumed_samples + dp_rank * micro;
  const int64_t last = std::min(first + micro, size_);
  std::vector<int64_t> out;
  for (int64_t p = first; p < last; ++p) out.push_back(index_at(p));
  return out;
}

SampleCursor::SampleCursor(const Sampler& sampler, int64_t dp_rank, int64_t consumed_samples)
    : sampler_(sampler), dp_rank_(dp_rank), consumed_(consumed_samples) {
  sampler_.micro_batch(consumed_, dp_rank_);  // validates the rank and the position
}

std::vector<int64_t> SampleCursor::next() {
  auto out = sampler_.micro_batch(consumed_, dp_rank_);
  consumed_ += sampler_.samples_per_micro_step();
  return out;
}

}  // namespace libai::train::data
