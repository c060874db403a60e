// Memory for tensors. The CPU allocator hands out 64-byte-aligned blocks and keeps freed
// blocks in power-of-two size classes for reuse (tensors of one shape come and go every
// step). The CUDA caching allocator (runtime/cuda/) does the same for device memory.
//
//   Allocator& a = allocator_for(Device::cpu());
//   void* p = a.allocate(1024);   // 64-byte aligned
//   a.deallocate(p, 1024);        // back to the pool, not to the OS
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/device.h"

namespace libai {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual void empty_cache() {}

  struct Stats {
    size_t allocated_bytes = 0;  // live, as requested (rounded to the size class)
    size_t cached_bytes = 0;     // held in the pool for reuse
    size_t peak_allocated_bytes = 0;
    uint64_t pool_hits = 0;
    uint64_t pool_misses = 0;
  };
  virtual Stats stats() const = 0;
};

inline constexpr size_t kCpuAlignment = 64;

Allocator& cpu_allocator();
// The allocator of a device; for CUDA it throws Unsupported in a build without CUDA.
Allocator& allocator_for(Device device);

// Registered by the CUDA backend when it is compiled in.
void register_cuda_allocator(Allocator* (*factory)(int device_index));

}  // namespace libai
