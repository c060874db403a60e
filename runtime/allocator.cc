#include "runtime/allocator.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <malloc.h>
#include <mutex>
#include <vector>

#include "runtime/error.h"
#include "runtime/memory_stats.h"

namespace libai {
namespace {

// Blocks up to 1 GiB are pooled by power-of-two class; larger ones go straight to the OS.
constexpr int kMinClassLog2 = 6;   // 64 bytes
constexpr int kMaxClassLog2 = 30;  // 1 GiB
constexpr size_t kMaxCachedBytes = size_t(4) << 30;

int size_class(size_t nbytes) {
  int log2 = kMinClassLog2;
  while ((size_t(1) << log2) < nbytes) ++log2;
  return log2;
}

class PooledCpuAllocator final : public Allocator {
 public:
  ~PooledCpuAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) nbytes = 1;
    int cls = size_class(nbytes);
    size_t block = size_t(1) << cls;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cls <= kMaxClassLog2) {
        auto& list = free_[cls - kMinClassLog2];
        if (!list.empty()) {
          void* p = list.back();
          list.pop_back();
          stats_.cached_bytes -= block;
          note_allocated(block, true);
          note_requested(nbytes);
          return p;
        }
      }
      note_allocated(block, false);
      note_requested(nbytes);
    }
    void* p = std::aligned_alloc(kCpuAlignment, block);
    if (p == nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated_bytes -= block;
      requested_ -= nbytes;
      LIBAI_THROW(IoError, "out of host memory allocating ", nbytes, " bytes");
    }
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    if (nbytes == 0) nbytes = 1;
    int cls = size_class(nbytes);
    size_t block = size_t(1) << cls;
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated_bytes -= block;
    requested_ -= nbytes;
    // Note [Cache as large as the peak]: a training step frees and reallocates its whole
    // working set each step; caching up to the peak allocation seen keeps those blocks
    // (freeing them made every step fault its pages in again: ~90k page faults a step on
    // GPT-2 small), while a process that never held more than 4 GiB caches at most that.
    const size_t limit = std::max(kMaxCachedBytes, stats_.peak_allocated_bytes);
    if (cls <= kMaxClassLog2 && stats_.cached_bytes + block <= limit) {
      free_[cls - kMinClassLog2].push_back(ptr);
      stats_.cached_bytes += block;
      return;
    }
    std::free(ptr);
  }

  // The pooled blocks go back to the C library, and its free pages to the system: a freed
  // block inside the heap (below glibc's mmap threshold, which grows with the blocks freed)
  // otherwise stays resident (Note [Streaming packed loads] releases layer after layer).
  void empty_cache() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& list : free_) {
        for (void* p : list) std::free(p);
        list.clear();
      }
      stats_.cached_bytes = 0;
    }
    ::malloc_trim(0);
  }

  Stats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 // runtime/memory_stats.h
  size_t requested(bool peak) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak ? requested_peak_ : requested_;
  }
  void reset_requested_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    requested_peak_ = requested_;
  }

 private:
  void note_requested(size_t nbytes) {
    requested_ += nbytes;
    requested_peak_ = std::max(requested_peak_, requested_);
  }
  void note_allocated(size_t block, bool hit) {
    stats_.allocated_bytes += block;
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes)
      stats_.peak_allocated_bytes = stats_.allocated_bytes;
    (hit ? stats_.pool_hits : stats_.pool_misses)++;
  }

  mutable std::mutex mutex_;
  std::array<std::vector<void*>, kMaxClassLog2 - kMinClassLog2 + 1> free_;
  Stats stats_;
  size_t requested_ = 0, requested_peak_ = 0;
};

Allocator* (*g_cuda_factory)(int) = nullptr;

}  // namespace

namespace {
PooledCpuAllocator& pooled_cpu_allocator() {
  // Leaked on purpose: tensors in static storage may be freed after main returns.
  static auto* allocator = new PooledCpuAllocator();
  return *allocator;
}
}  // namespace

Allocator& cpu_allocator() { return pooled_cpu_allocator(); }

size_t cpu_requested_bytes() { return pooled_cpu_allocator().requested(false); }
size_t cpu_requested_peak_bytes() { return pooled_cpu_allocator().requested(true); }
void reset_cpu_requested_peak() { pooled_cpu_allocator().reset_requested_peak(); }

void register_cuda_allocator(Allocator* (*factory)(int)) { g_cuda_factory = factory; }

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  LIBAI_CHECK_KIND(Unsupported, g_cuda_factory != nullptr, "device ", device,
                   " requested, but this build of LiBai-Actor has no CUDA backend");
  return *g_cuda_factory(device.index);
}

}  // namespace libai
