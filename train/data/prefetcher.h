// Builds the next micro-batches on a background thread while the step runs: a bounded queue
// between one producer thread and the consumer, which reports how long it waited.
//
//   data::SampleCursor cursor(sampler, dp_rank, consumed_samples);
//   data::Prefetcher prefetcher(data::micro_batch_producer(dataset, cursor), /*capacity=*/4);
//   while (auto batch = prefetcher.next()) step(*batch);   // nullopt once the producer ends
//   prefetcher.wait_seconds();                             // time next() blocked, in total
//
// An exception in the producer is rethrown by the next() that would have returned its batch
// (after the batches produced before it), so a bad sample stops training with its own error.
// The destructor stops the thread (a producer blocked on a full queue is released).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "models/model.h"
#include "train/data/dataset.h"
#include "train/data/sampler.h"

namespace libai::train::data {

class Prefetcher {
 public:
  // Returns the next batch, or nullopt when there are no more.
  using Producer = std::function<std::optional<models::TensorMap>()>;

  explicit Prefetcher(Producer produce, size_t capacity = 2);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  std::optional<models::TensorMap> next();
  double wait_seconds() const;  // total time next() waited for the producer
  int64_t batches() const;      // batches handed out

 private:
  void run();

  Producer produce_;
  size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<models::TensorMap> queue_;
  bool finished_ = false, stopping_ = false;
  std::exception_ptr error_;
  double wait_seconds_ = 0;
  int64_t batches_ = 0;
  std::thread thread_;
};

// A producer of collated micro-batches for `cursor`'s rank: the dataset's samples at the
// cursor's next indices; ends when the cursor is exhausted or after `max_batches` (-1: never).
// The dataset and cursor must outlive the prefetcher; the cursor advances on the producer thread.
Prefetcher::Producer micro_batch_producer(const Dataset& dataset, SampleCursor& cursor,
                                          int64_t max_batches = -1);

}  // namespace libai::train::data
