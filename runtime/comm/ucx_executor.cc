#include "runtime/comm/ucx_executor.h"

#include "runtime/error.h"

namespace libai::comm::detail {
namespace {

std::string broken_message(const std::string& reason) {
  return str_cat("ucx communicator is broken by an earlier error: ", reason);
}

}  // namespace

Executor::Executor(const RendezvousOptions& options) {
  std::promise<void> ready;
  std::future<void> connected = ready.get_future();
  thread_ = std::thread([this, options, &ready] { main(options, ready); });
  try {
    connected.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

Executor::~Executor() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queue_changed_.notify_all();
  thread_.join();
}

void Executor::submit(Task task) {
  std::lock_guard lock(mutex_);
  LIBAI_CHECK_KIND(CommunicationError, broken_.empty(), broken_message(broken_));
  queue_.push_back(std::move(task));
  queue_changed_.notify_all();
}

void Executor::abort(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (broken_.empty()) broken_ = reason;
  }
  world_->request_abort(reason);
  queue_changed_.notify_all();
}

void Executor::main(const RendezvousOptions& options, std::promise<void>& ready) {
  try {
    world_ = std::make_unique<UcxWorld>(options);
    timeout_ = options.timeout;
  } catch (...) {
    ready.set_exception(std::current_exception());
    return;
  }
  ready.set_value();  // `ready` is gone after this
  IdleBackoff backoff;
  while (true) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      if (in_flight_.empty()) {
        queue_changed_.wait(lock, [&] {
          return !queue_.empty() || stopping_ || (world_->abort_requested() && !world_->broken());
        });
      }
      if (queue_.empty() && stopping_ && in_flight_.empty()) break;
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (world_->abort_requested() && !world_->broken()) {
      break_world(world_->requested_reason());  // tells the peers, fails what is in flight
    }
    if (task.work) {
      execute(task);
      backoff.busy();
    } else if (world_->progress() | poll_point_to_point()) {
      backoff.busy();
    } else {
      // A transfer posted meanwhile (a message plane's send) ends the sleep at once.
      backoff.idle([this](std::chrono::microseconds d) {
        std::unique_lock lock(mutex_);
        queue_changed_.wait_for(lock, d, [&] { return !queue_.empty() || stopping_; });
      });
    }
  }
  world_.reset();  // the goodbye with every rank (Note [UCX shutdown]) runs on this thread
}

void Executor::execute(Task& task) {
  if (world_->broken()) {
    task.work->finish(
        std::make_exception_ptr(CommunicationError(broken_message(world_->broken_reason()))));
    return;
  }
  try {
    if (task.post) {
      TransferPtr transfer = task.post(*world_);
      in_flight_.push_back({transfer, Clock::now() + timeout_, std::move(task.what), task.work});
    } else {
      task.run(*world_);
      task.work->finish(nullptr);
    }
    poll_point_to_point();
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(mutex_);  // later submits throw from here on
      if (broken_.empty()) broken_ = e.what();
    }
    // The caller first (abort() from another thread must wake it at once), then the peers:
    // telling them may take up to 200 ms.
    task.work->finish(std::current_exception());
    break_world(e.what());
  }
}

// Completes the point-to-point transfers that are done; returns whether any was.
bool Executor::poll_point_to_point() {
  bool any = false;
  for (std::size_t i = 0; i < in_flight_.size();) {
    InFlight& p = in_flight_[i];
    std::string error = world_->settled_failure(*p.transfer);
    if (error.empty() && p.transfer->done && !p.transfer->is_send &&
        p.transfer->length != p.transfer->bytes) {
      error = str_cat("got ", p.transfer->length, " bytes, the tensor has ", p.transfer->bytes);
    }
    if (error.empty() && !p.transfer->done && Clock::now() >= p.deadline) {
      error = str_cat("timed out after ", timeout_.count(), " ms");
    }
    if (!error.empty()) {
      const UcxWorkPtr work = p.work;
      const std::string message = str_cat(p.what, ": ", error);
      in_flight_.erase(in_flight_.begin() + std::ptrdiff_t(i));
      break_world(message);
      work->finish(std::make_exception_ptr(CommunicationError(message)));
      return true;
    }
    if (p.transfer->done) {
      p.work->finish(nullptr);
      in_flight_.erase(in_flight_.begin() + std::ptrdiff_t(i));
      any = true;
    } else {
      ++i;
    }
  }
  return any;
}

void Executor::break_world(const std::string& reason) {
  world_->abort(reason);
  {
    std::lock_guard lock(mutex_);
    if (broken_.empty()) broken_ = reason;
  }
  const auto error = std::make_exception_ptr(CommunicationError(broken_message(reason)));
  for (InFlight& p : in_flight_) p.work->finish(error);
  in_flight_.clear();
}

}  // namespace libai::comm::detail
