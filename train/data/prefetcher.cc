#include "train/data/prefetcher.h"

#include <chrono>

namespace libai::train::data {

Prefetcher::Prefetcher(Producer produce, size_t capacity)
    : produce_(std::move(produce)), capacity_(capacity) {
  LIBAI_CHECK(capacity_ >= 1, "Prefetcher: capacity should be >= 1");
  thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  not_full_.notify_all();
  thread_.join();
}

void Prefetcher::run() {
  while (true) {
    std::optional<models::TensorMap> batch;
    std::exception_ptr error;
    try {
      batch = produce_();
    } catch (...) {
      error = std::current_exception();
    }
    // Published after the catch block ended: ending it drops the thrown object's own reference
    // (inside libstdc++, whose atomics ThreadSanitizer cannot see), so it must come before the
    // hand-off under the mutex, never after the consumer may have used and dropped the error.
    if (error) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::move(error);
      finished_ = true;
      not_empty_.notify_all();
      return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (!batch) {
      finished_ = true;
      not_empty_.notify_all();
      return;
    }
    not_full_.wait(lock, [&] { return stopping_ || queue_.size() < capacity_; });
    if (stopping_) return;
    queue_.push_back(std::move(*batch));
    not_empty_.notify_one();
  }
}

std::optional<models::TensorMap> Prefetcher::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto start = std::chrono::steady_clock::now();
  not_empty_.wait(lock, [&] { return !queue_.empty() || finished_; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (queue_.empty()) {
    if (error_) {
      auto e = error_;
      error_ = nullptr;  // reported once; later calls see the end
      std::rethrow_exception(e);
    }
    return std::nullopt;
  }
  models::TensorMap batch = std::move(queue_.front());
  queue_.pop_front();
  ++batches_;
  not_full_.notify_one();
  return batch;
}

double Prefetcher::wait_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return wait_seconds_;
}

int64_t Prefetcher::batches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return batches_;
}

Prefetcher::Producer micro_batch_producer(const Dataset& dataset, SampleCursor& cursor,
                                          int64_t max_batches) {
  auto made = std::make_shared<int64_t>(0);
  return [&dataset, &cursor, max_batches, made]() -> std::optional<models::TensorMap> {
    if (max_batches >= 0 && *made >= max_batches) return std::nullopt;
    auto indices = cursor.next();
    if (indices.empty()) return std::nullopt;
    ++*made;
    return make_batch(dataset, indices);
  };
}

}  // namespace libai::train::data
