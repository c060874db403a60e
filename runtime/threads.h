// Thread budgets: each CPU device gets a number of compute threads, and the sum over the
// devices of a process never exceeds the cores. Kernels split work with parallel_for on
// the budget of the device they run on; so does BLAS (runtime/blas.h).
//
//   set_thread_budget(Device::cpu(0), 2);
//   parallel_for(0, rows, /*grain=*/64, [&](int64_t begin, int64_t end) { ... });
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "runtime/device.h"

namespace libai {

int hardware_cores();
// Throws InvalidArgument when the budgets of all CPU devices would exceed the cores.
void set_thread_budget(Device device, int threads);
int thread_budget(Device device);

// Budgets for a scope: replaces every budget with `budgets` (devices not listed fall back to
// the default, all cores, when used) and restores the previous ones when it ends. For ranks
// on threads of one process (eager SPMD training), each computing on its own cpu:r.
class ThreadBudgetScope {
 public:
  explicit ThreadBudgetScope(const std::vector<std::pair<Device, int>>& budgets);
  ~ThreadBudgetScope();
  ThreadBudgetScope(const ThreadBudgetScope&) = delete;
  ThreadBudgetScope& operator=(const ThreadBudgetScope&) = delete;

 private:
  std::map<int, int> previous_;
};

// The device whose budget the calling thread uses (set by stage threads; default cpu:0).
void set_current_cpu_device(Device device);
Device current_cpu_device();

// Splits [begin, end) into chunks of at least `grain` and runs them on the current device's
// pool; the calling thread takes part. Runs inline when one chunk suffices.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace libai
