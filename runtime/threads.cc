#include "runtime/threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/error.h"

namespace libai {
namespace {

// Note [Parallel regions]
// A pool runs one parallel region at a time (region_mutex_). The region's state (its task,
// its chunk count, the next chunk to claim, how many finished) lives in a Region on the
// calling thread's stack, published to the workers under mutex_. A worker that wakes late,
// after its region ended and the next one began, must not mix the two: it takes a pointer to
// the region current when it locks, counts itself in that region's `active`, and only then
// claims chunks from it. The caller returns only when every chunk is done and no worker still
// holds the region, so a worker never touches a Region that is gone, and never runs a chunk
// of the next region against the previous one's count. (The earlier pool kept one task_,
// chunks_ and next_ for all regions and read them unlocked: a late worker could read the next
// region's chunks_ while run() wrote it, and claim chunk c of one region with the counter of
// another. ThreadSanitizer reported it as soon as two threads ran regions one after the other,
// as the service's engine and encoder threads do.)
class ThreadPool {
 public:
  explicit ThreadPool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int workers() const { return int(threads_.size()); }

  void run(int64_t chunks, const std::function<void(int64_t)>& task) {
    std::lock_guard<std::mutex> one_region(region_mutex_);
    Region region{&task, chunks};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      region_ = &region;
      ++generation_;
    }
    wake_.notify_all();
    drain(region);
    spin_until([&] { return region.complete.load(std::memory_order_acquire); });
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return region.done == region.chunks && region.active == 0; });
    region_ = nullptr;
    // A chunk that threw: the region still completed (every chunk ran or was skipped), and
    // the first error is rethrown on the calling thread, where the caller can handle it.
    if (region.error) std::rethrow_exception(region.error);
  }

 private:
  struct Region {
    const std::function<void(int64_t)>* task;
    int64_t chunks;                  // fixed before the region is published
    std::atomic<int64_t> next{0};    // the next chunk to claim
    int64_t done = 0;                // chunks finished; under mutex_
    int active = 0;                  // workers holding this region; under mutex_
    std::exception_ptr error;        // the first chunk's exception; under mutex_
    std::atomic<bool> complete{false};  // done == chunks && active == 0, set under mutex_
  };

  // Note [Spinning before sleeping]
  // A forward pass runs hundreds of regions back to back (every product, norm, softmax and
  // add), each a millisecond or less. Waking a sleeping worker through the condition
  // variable takes tens of microseconds on a virtual machine, and so does waking the caller
  // when the worker finishes last. So both first spin, for at most kSpin, on the atomic that
  // the other side sets, and only then sleep: between back-to-back regions nobody sleeps.
  // The spin is bounded and ends when its pool is idle, unlike OpenBLAS's long spins on
  // threads outside the budget (Note [One pool for BLAS] in runtime/blas.cc).
  static constexpr auto kSpin = std::chrono::microseconds(100);

  template <class Ready>
  static void spin_until(const Ready& ready) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0; !ready(); ++i) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return;
    }
  }

  // Runs chunks of `region` until none is left to claim.
  void drain(Region& region) {
    int64_t completed = 0;
    for (int64_t c; (c = region.next.fetch_add(1)) < region.chunks;) {
      try {
        (*region.task)(c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!region.error) region.error = std::current_exception();
      }
      ++completed;
    }
    if (completed > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      region.done += completed;
      if (region.done == region.chunks && region.active == 0) {
        region.complete.store(true, std::memory_order_release);
      }
      if (region.done == region.chunks) finished_.notify_all();
    }
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      Region* region;
      spin_until([&] { return generation_.load() != seen || stop_.load(); });
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && region_ != nullptr); });
        if (stop_) return;
        seen = generation_;
        region = region_;
        ++region->active;
      }
      drain(*region);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--region->active == 0 && region->done == region->chunks) {
        region->complete.store(true, std::memory_order_release);
        finished_.notify_all();
      }
    }
  }

  std::vector<std::thread> threads_;
  std::mutex region_mutex_, mutex_;
  std::condition_variable wake_, finished_;
  Region* region_ = nullptr;  // the region running now; under mutex_
  // Written under mutex_, atomic so that idle workers can spin on them without it.
  std::atomic<uint64_t> generation_{0};  // regions started
  std::atomic<bool> stop_{false};
};

struct Budgets {
  std::mutex mutex;
  std::map<int, int> threads;  // cpu index -> budget
  // Shared: a pool replaced by a budget change lives on until the regions running on it end
  // (another thread may be inside run() when this one replaces it).
  std::map<int, std::shared_ptr<ThreadPool>> pools;
};

Budgets& budgets() {
  static auto* b = new Budgets();  // leaked: pools may be used during static destruction
  return *b;
}

thread_local Device t_current = Device::cpu(0);
thread_local bool t_in_parallel = false;

std::shared_ptr<ThreadPool> pool_for(Device device) {
  Budgets& b = budgets();
  std::lock_guard<std::mutex> lock(b.mutex);
  auto it = b.threads.find(device.index);
  int threads = it == b.threads.end() ? hardware_cores() : it->second;
  auto& pool = b.pools[device.index];
  if (!pool || pool->workers() != threads - 1) pool = std::make_shared<ThreadPool>(threads - 1);
  return pool;
}

}  // namespace

int hardware_cores() { return std::max(1u, std::thread::hardware_concurrency()); }

void set_thread_budget(Device device, int threads) {
  LIBAI_CHECK(device.is_cpu(), "thread budgets apply to cpu devices, not ", device);
  LIBAI_CHECK(threads >= 1, "thread budget of ", device, " must be at least 1, got ", threads);
  Budgets& b = budgets();
  std::lock_guard<std::mutex> lock(b.mutex);
  int total = threads;
  for (auto& [index, n] : b.threads)
    if (index != device.index) total += n;
  LIBAI_CHECK(total <= hardware_cores(), "thread budgets would total ", total,
              " threads but this host has ", hardware_cores(), " cores (setting ", device, " to ",
              threads, ")");
  b.threads[device.index] = threads;
}

ThreadBudgetScope::ThreadBudgetScope(const std::vector<std::pair<Device, int>>& list) {
  std::map<int, int> next;
  int total = 0;
  for (const auto& [device, threads] : list) {
    LIBAI_CHECK(device.is_cpu() && threads >= 1, "thread budget of ", device, ": ", threads);
    next[device.index] = threads;
    total += threads;
  }
  LIBAI_CHECK(total <= hardware_cores(), "thread budgets would total ", total,
              " threads but this host has ", hardware_cores(), " cores");
  Budgets& b = budgets();
  std::lock_guard<std::mutex> lock(b.mutex);
  previous_ = b.threads;
  b.threads = std::move(next);
}

ThreadBudgetScope::~ThreadBudgetScope() {
  Budgets& b = budgets();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.threads = std::move(previous_);
}

int thread_budget(Device device) {
  Budgets& b = budgets();
  std::lock_guard<std::mutex> lock(b.mutex);
  auto it = b.threads.find(device.index);
  return it == b.threads.end() ? hardware_cores() : it->second;
}

void set_current_cpu_device(Device device) { t_current = device; }
Device current_cpu_device() { return t_current; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t total = end - begin;
  int threads = t_in_parallel ? 1 : thread_budget(t_current);
  int64_t chunks = std::min<int64_t>(threads, (total + grain - 1) / grain);
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  int64_t step = (total + chunks - 1) / chunks;
  pool_for(t_current)->run(chunks, [&](int64_t c) {
    bool was = t_in_parallel;
    t_in_parallel = true;
    int64_t b0 = begin + c * step;
    int64_t e0 = std::min(end, b0 + step);
    if (b0 < e0) fn(b0, e0);
    t_in_parallel = was;
  });
}

}  // namespace libai
