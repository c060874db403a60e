// The CUDA caching allocator: one pool per device. Requests are rounded to a size class
// (multiples of 512 B up to 1 MiB, of 2 MiB above), freed blocks wait in their class for the
// next request of that class, and cudaMalloc is called only on a miss. When cudaMalloc
// fails the pool is emptied and the allocation retried once. Reuse without synchronising
// is safe because each device has one stream (Note [One stream per device]).
#include <array>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/error.h"

namespace libai::cuda {
namespace {

constexpr size_t kSmallQuantum = 512;
constexpr size_t kLargeThreshold = size_t(1) << 20;
constexpr size_t kLargeQuantum = size_t(2) << 20;

size_t size_class(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  const size_t q = nbytes <= kLargeThreshold ? kSmallQuantum : kLargeQuantum;
  return (nbytes + q - 1) / q * q;
}

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int index) : index_(index) {}

  void* allocate(size_t nbytes) override {
    const size_t block = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(block);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= block;
        note_allocated(p, block, true);
        return p;
      }
    }
    DeviceGuard guard(index_);
    void* p = nullptr;
    cudaError_t status = cudaMalloc(&p, block);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      empty_cache();
      status = cudaMalloc(&p, block);
    }
    if (status == cudaErrorMemoryAllocation)
      check(status, str_cat("cudaMalloc of ", nbytes, " bytes on cuda:", index_).c_str());
    check(status, "cudaMalloc");
    std::lock_guard<std::mutex> lock(mutex_);
    note_allocated(p, block, false);
    return p;
  }

  void deallocate(void* ptr, size_t) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    LIBAI_ASSERT(it != live_.end(), "cuda:", index_, " block freed twice or not from this pool");
    const size_t block = it->second;
    live_.erase(it);
    stats_.allocated_bytes -= block;
    free_[block].push_back(ptr);
    stats_.cached_bytes += block;
  }

  void empty_cache() override {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [size, list] : free_) blocks.insert(blocks.end(), list.begin(), list.end());
      free_.clear();
      stats_.cached_bytes = 0;
    }
    if (blocks.empty()) return;
    DeviceGuard guard(index_);
    // cudaFree waits for the device, so blocks still read by queued kernels are safe.
    for (void* p : blocks) cudaFree(p);
  }

  Stats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  void note_allocated(void* p, size_t block, bool hit) {
    live_[p] = block;
    stats_.allocated_bytes += block;
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes)
      stats_.peak_allocated_bytes = stats_.allocated_bytes;
    (hit ? stats_.pool_hits : stats_.pool_misses)++;
  }

  const int index_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  std::unordered_map<void*, size_t> live_;               // block -> its size class
  Stats stats_;
};

// Creates the pool of a device on first use. Pools are leaked on purpose: tensors in static
// storage may be freed after main returns, and the CUDA runtime may be gone by then.
Allocator* cuda_allocator(int index) {
  static std::mutex mutex;
  static std::array<CudaCachingAllocator*, 64> pools{};
  check_device_index(index);
  std::lock_guard<std::mutex> lock(mutex);
  auto& pool = pools[size_t(index)];
  if (pool == nullptr) pool = new CudaCachingAllocator(index);
  return pool;
}

// Registration stores a function pointer only; no CUDA call happens at static init.
const bool registered [[maybe_unused]] = [] {
  register_cuda_allocator(&cuda_allocator);
  return true;
}();

}  // namespace
}  // namespace libai::cuda
