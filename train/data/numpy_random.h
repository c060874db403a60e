// numpy.random.RandomState(seed)'s shuffle, reproduced: the same MT19937 stream and the same
// bounded-integer draws, so index arrays shuffled here equal numpy's element for element.
//
//   NumpyRandomState rng(1234);               // numpy.random.RandomState(1234)
//   std::vector<int32_t> idx = {...};
//   rng.shuffle(idx);                          // rng.shuffle(idx) on a 1-d array
//
// Note [numpy's legacy shuffle]: RandomState seeds MT19937 from a 32-bit int by Knuth's
// initialisation (the reference genrand seeding, which std::mt19937's seed also follows).
// shuffle(x) of a 1-d array walks i = n-1 .. 1 and swaps x[i] with x[j], j = interval(i):
// mask = the smallest all-ones bit mask >= i, then draw (32-bit draws when i < 2^32, else
// 64-bit = (first << 32) | second) and reject while (draw & mask) > i. Megatron's GPT dataset
// shuffles its document and sample indices this way, so the same seed gives Megatron's order.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace libai::train::data {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : engine_(seed) {}

  uint32_t next_uint32() { return uint32_t(engine_()); }
  uint64_t next_uint64() {
    const uint64_t high = next_uint32();
    return (high << 32) | next_uint32();
  }
  // A uniform integer in [0, max], numpy's random_interval.
  uint64_t interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    for (int s = 1; s <= 32; s *= 2) mask |= mask >> s;
    uint64_t value;
    if (max <= 0xffffffffULL) {
      while ((value = (next_uint32() & mask)) > max) {
      }
    } else {
      while ((value = (next_uint64() & mask)) > max) {
      }
    }
    return value;
  }
  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[size_t(interval(i))]);
  }
  // numpy's permutation(n): arange(n) shuffled.
  std::vector<int64_t> permutation(int64_t n) {
    std::vector<int64_t> p(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) p[size_t(i)] = i;
    shuffle(p);
    return p;
  }

 private:
  std::mt19937 engine_;
};

}  // namespace libai::train::data
