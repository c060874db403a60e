#include "actors/pinned_thread.h"

#include <pthread.h>

#include "runtime/threads.h"

namespace libai::actors {

PinnedThread::PinnedThread(std::string name, Device device)
    : name_(std::move(name)), device_(device), thread_([this] { loop(); }) {}

PinnedThread::~PinnedThread() { stop(); }

void PinnedThread::post(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void PinnedThread::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    jobs_.clear();
  }
  wake_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void PinnedThread::loop() {
  // Linux thread names hold 15 characters: enough for "stage 12 tp 3".
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  if (device_.is_cpu()) set_current_cpu_device(device_);
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace libai::actors
