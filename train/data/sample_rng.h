// Random draws for one sample, keyed by (seed, dataset name, sample index) on the counter RNG
// (runtime/rng.h): sample i's draws never depend on which samples were made before it, so any
// sample is regenerated exactly after a resume, on any rank or thread.
//
//   SampleRng rng(seed, "bert_pretraining", index);
//   if (rng.uniform() < 0.5) ...;        // [0, 1)
//   int64_t token = rng.below(vocab);    // [0, vocab)
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/rng.h"

namespace libai::train::data {

class SampleRng {
 public:
  SampleRng(uint64_t seed, std::string_view name, int64_t index)
      : key_(derive(RngKey{seed, stream_id(name)}, uint64_t(index))) {}

  double uniform() { return double(next64() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n) (modulo of 64 random bits: bias under n / 2^64).
  int64_t below(int64_t n) { return n <= 1 ? 0 : int64_t(next64() % uint64_t(n)); }
  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[size_t(below(int64_t(i) + 1))]);
  }

 private:
  uint64_t next64() {
    const auto w = philox4x32(key_, counter_++);
    return (uint64_t(w[0]) << 32) | w[1];
  }
  RngKey key_;
  uint64_t counter_ = 0;
};

}  // namespace libai::train::data
