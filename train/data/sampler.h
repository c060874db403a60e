// Which dataset samples each data-parallel rank takes, micro-step by micro-step, resumable from
// a count of consumed samples (LiBai's CyclicSampler and SingleRoundSampler, dealt out in the
// order of Note [Micro-batch order] in train/train_step.h).
//
//   data::CyclicSampler sampler(dataset.size(), {.micro_batch_size = 8, .data_parallel_size = 2,
//                                                .shuffle = true, .seed = 1234});
//   data::SampleCursor cursor(sampler, dp_rank, /*consumed_samples=*/checkpoint.consumed);
//   std::vector<int64_t> indices = cursor.next();   // this rank's next micro-batch
//   cursor.consumed_samples();                      // save it; resuming from it continues here
//
// Note [Global sample order]: the samplers see one global sequence of sample positions. Each
// micro-step takes the next micro x dp positions and rank r takes positions
// [r micro, (r + 1) micro) of them, so micro-batch k of a step with consumed_samples c0 at its
// start is, on rank r, positions c0 + [(k dp + r) micro, (k dp + r + 1) micro) — what
// TrainStep's micro-batch order assumes. consumed_samples counts positions over all ranks (as
// Megatron's and LiBai's do), so it is the same number on every rank. Position p is the
// dataset's sample perm_e[p mod n] in epoch e = p / n, perm_e = numpy's
// RandomState(seed + e).permutation(n) when shuffling (LiBai reseeds per epoch the same way),
// the identity otherwise. Unlike LiBai's CyclicSampler, which hands each rank a fixed block of
// the dataset, no sample is dropped and a dp size change keeps the global order.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace libai::train::data {

struct SamplerOptions {
  int64_t micro_batch_size = 1;
  int64_t data_parallel_size = 1;
  bool shuffle = false;
  uint32_t seed = 0;
};

class Sampler {
 public:
  Sampler(int64_t dataset_size, SamplerOptions options);
  virtual ~Sampler() = default;

  int64_t dataset_size() const { return size_; }
  const SamplerOptions& options() const { return options_; }
  int64_t samples_per_micro_step() const {
    return options_.micro_batch_size * options_.data_parallel_size;
  }
  // The dataset index at global position `position` (Note [Global sample order]).
  int64_t index_at(int64_t position) const;
  // Rank `dp_rank`'s micro-batch of the micro-step that starts at `consumed_samples` (a multiple
  // of samples_per_micro_step()); empty when the sampler is exhausted there.
  virtual std::vector<int64_t> micro_batch(int64_t consumed_samples, int64_t dp_rank) const = 0;

 protected:
  void check_position(int64_t consumed_samples, int64_t dp_rank) const;
  int64_t size_;
  SamplerOptions options_;

 private:
  mutable std::mutex mutex_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> permutation_;
};

// Cycles over the dataset epoch after epoch without end (training).
class CyclicSampler : public Sampler {
 public:
  using Sampler::Sampler;
  std::vector<int64_t> micro_batch(int64_t consumed_samples, int64_t dp_rank) const override;
};

// One pass (evaluation): the last micro-step's batches may be short or empty on some ranks;
// drop_last drops a last micro-step that would not fill every rank.
class SingleRoundSampler : public Sampler {
 public:
  SingleRoundSampler(int64_t dataset_size, SamplerOptions options, bool drop_last = false)
      : Sampler(dataset_size, options), drop_last_(drop_last) {}
  std::vector<int64_t> micro_batch(int64_t consumed_samples, int64_t dp_rank) const override;

 private:
  bool drop_last_;
};

// A rank's position in a sampler's sequence.
class SampleCursor {
 public:
  SampleCursor(const Sampler& sampler, int64_t dp_rank, int64_t consumed_samples = 0);
  // The next micro-batch (empty: exhausted); advances consumed_samples by one micro-step.
  std::vector<int64_t> next();
  int64_t consumed_samples() const { return consumed_; }

 private:
  const Sampler& sampler_;
  int64_t dp_rank_;
  int64_t consumed_;
};

}  // namespace libai::train::data
