// Shared by the libFuzzer targets (built and run by tools/run_fuzzers.sh, not by CMake).
// Contract under test: whatever the bytes, a loader either succeeds or throws libai::Error;
// any other exception, crash or sanitizer report is a finding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace libai::fuzz {

// Reads tensor values only when small: a valid stride-0 view may have a huge element count.
constexpr int64_t kMaxElementsRead = 4096;

inline void touch(const Tensor& t) {
  if (t.numel() <= kMaxElementsRead) (void)t.to_vector<double>();
}

// Runs `load` on the bytes; libai::Error is an accepted outcome, anything else propagates.
template <typename Load>
void run_one(const uint8_t* data, size_t size, Load&& load) {
  try {
    load(data, size);
  } catch (const Error&) {
  }
}

}  // namespace libai::fuzz
