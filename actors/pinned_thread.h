// A thread of its own for one stage: it computes on one device (its CPU thread budget, or
// later its CUDA stream), never on CAF's shared worker threads, so a long matmul never stalls
// the actors' message handling.
//
//   PinnedThread thread("stage 1", Device::cpu(1));
//   thread.post([] { /* runs on the pinned thread, in post order */ });
//   thread.stop();   // finishes the job in progress, drops queued ones, joins
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/device.h"

namespace libai::actors {

class PinnedThread {
 public:
  PinnedThread(std::string name, Device device);
  ~PinnedThread();
  PinnedThread(const PinnedThread&) = delete;
  PinnedThread& operator=(const PinnedThread&) = delete;

  void post(std::function<void()> job);
  void stop();

 private:
  void loop();
  std::string name_;
  Device device_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace libai::actors
