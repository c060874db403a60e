// Bytes of host memory that tensors asked for, as requested (the CPU allocator rounds each block
// up to a power of two: Allocator::Stats counts the blocks). For measurements of what a model
// holds against formulas (bench/zero_memory.cc); process-wide.
//
//   reset_cpu_requested_peak();
//   ... a training step ...
//   size_t peak = cpu_requested_peak_bytes() - baseline;
#pragma once

#include <cstddef>
#include <cstdint>

namespace libai {

// A field of /proc/self/status in kB ("VmRSS:", "VmHWM:" the peak); -1 where it is absent.
int64_t process_status_kb(const char* field);
// Restarts the peak RSS (VmHWM) from the current RSS (/proc/self/clear_refs, Linux >= 4.0).
void reset_process_peak_rss();

size_t cpu_requested_bytes();       // live now
size_t cpu_requested_peak_bytes();  // the most live since the last reset
void reset_cpu_requested_peak();    // the peak restarts from what is live now

}  // namespace libai
