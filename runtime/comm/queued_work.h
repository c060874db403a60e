// Internal to the process-group backends (ucx and shm): the Work of an operation queued for
// the backend's one operations thread. It keeps the operation's tensors alive until the thread
// finishes it, then wakes every waiter.
//
//   auto work = std::make_shared<QueuedWork>(std::vector<Tensor>{t});  // caller's thread
//   work->finish(nullptr);                                             // operations thread
//   work->wait();                                  // caller: rethrows the operation's error
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/comm/communicator.h"

namespace libai::comm::detail {

class QueuedWork final : public Work {
 public:
  explicit QueuedWork(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {}
  // Needs no deadline of its own: the operations thread bounds every step of the operation.
  void wait() override;
  bool completed() const override;
  // Wakes the waiters; `error` null on success. Drops the tensors: after a failure the
  // backend keeps alive what its transport may still touch.
  void finish(std::exception_ptr error);

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<Tensor> tensors_;  // alive until the operation is over
};
using QueuedWorkPtr = std::shared_ptr<QueuedWork>;

}  // namespace libai::comm::detail
