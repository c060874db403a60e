// Seconds per call of a short function: the best of 5 blocks of about 0.1 s each (other load
// only slows a block down), for the plain benchmark executables' kernel tables.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>

namespace libai::bench {

inline double best_seconds_per_call(const std::function<void()>& fn) {
  using clock = std::chrono::steady_clock;
  fn();
  auto start = clock::now();
  int64_t calls = 0;
  while (std::chrono::duration<double>(clock::now() - start).count() < 0.05) {
    fn();
    ++calls;
  }
  const double once = std::chrono::duration<double>(clock::now() - start).count() / double(calls);
  const int64_t per_block = std::max<int64_t>(1, int64_t(0.1 / once));
  double best = 1e30;
  for (int block = 0; block < 5; ++block) {
    auto t0 = clock::now();
    for (int64_t i = 0; i < per_block; ++i) fn();
    best = std::min(best,
                    std::chrono::duration<double>(clock::now() - t0).count() / double(per_block));
  }
  return best;
}

}  // namespace libai::bench
