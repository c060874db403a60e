// Median and range of repeated measurements, for the plain benchmark executables' tables.
#pragma once

#include <algorithm>
#include <vector>

namespace libai::bench {

struct Summary {
  double median = 0, min = 0, max = 0;
};

// `v` must not be empty.
inline Summary summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

}  // namespace libai::bench
