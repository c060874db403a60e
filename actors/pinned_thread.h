// A thread of its own for one stage: it computes on one device (its CPU thread budget, or
// later its CUDA stream), never on CAF's shared worker threads, so a long matmul never stalls
// the actors' message handling.
//
//   PinnedThread thread("stage 1", Device::cpu(1));
//   thread.post([] { /* runs on the pinned thread, in post order */ });
//   thread.stop();   // finishes the job in progress, drops queued ones, joins
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/device.h"

namespace libai::actors {

// Sleeps until `until` to within a few microseconds: the OS sleep overshoots by 50-150 us on a
// VM, 5% of a 2 ms synthetic stage, so the last 200 us are spent spinning instead (not
// yielding: on a loaded host a yield can give the core away for a whole time slice, which
// made a 1 ms layer time at 1.3-1.6 ms while other nodes profiled). For synthetic stages and
// emulated slow devices, whose cost must be what was asked.
void sleep_precisely_until(std::chrono::steady_clock::time_point until);

// An emulated slower device (train.cluster.device_slowdown): after work that began at `start`,
// sleeps until it has taken `slowdown` times as long.
void emulate_slowdown(std::chrono::steady_clock::time_point start, double slowdown);

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
