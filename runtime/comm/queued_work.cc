#include "runtime/comm/queued_work.h"

namespace libai::comm::detail {

void QueuedWork::wait() {
  std::unique_lock lock(mutex_);
  done_changed_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool QueuedWork::completed() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void QueuedWork::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    tensors_.clear();
  }
  done_changed_.notify_all();
}

}  // namespace libai::comm::detail
