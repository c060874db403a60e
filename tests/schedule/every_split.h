// For the tests' independent references: an exhaustive search over every order of `stages`
// devices and every contiguous split of `layers` layers (each stage at least one), with no
// prefix sums and no sweep.
#pragma once

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

namespace libai::schedule::testing {

// The least `bottleneck(order, cut)` over every order and split: stage k runs on device
// order[k] and holds layers [cut[k], cut[k + 1]); `bottleneck` returns +inf for a split that
// does not fit. +inf when none fits.
inline double best_over_orders_and_splits(
    int stages, int layers,
    const std::function<double(const std::vector<int>& order, const std::vector<int>& cut)>&
        bottleneck) {
  std::vector<int> order(static_cast<size_t>(stages));
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> cut(static_cast<size_t>(stages) + 1, 0);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int)> go = [&](int s) {
    if (s == stages) {
      if (cut[size_t(stages)] == layers) best = std::min(best, bottleneck(order, cut));
      return;
    }
    for (int to = cut[size_t(s)] + 1; to <= layers; ++to) {
      cut[size_t(s) + 1] = to;
      go(s + 1);
    }
  };
  do {
    go(0);
  } while (std::next_permutation(order.begin(), order.end()));
  return best;
}

}  // namespace libai::schedule::testing
