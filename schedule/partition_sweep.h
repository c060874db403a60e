// Internal to schedule/: one stage of the feasibility sweep of Note [Exact min-max contiguous
// partition] (partition.cc), shared by balanced_partition and the search over device orders.
#pragma once

#include <vector>

namespace libai::schedule::detail {

struct LayerPrefixes {
  std::vector<double> memory, activation;  // [L + 1]: sums over layers [0, j)
  // unit[k][i]: the largest layer_unit_memory over layers [i, i + 2^k) (a sparse table: the
  // largest over any range in O(1)); empty when no layer has a unit in flight.
  std::vector<std::vector<double>> unit;
  double largest_unit(int i, int j) const;  // over layers [i, j), j > i; 0 without units
};
// activation and unit may be empty.
LayerPrefixes layer_prefixes(const std::vector<double>& memory,
                             const std::vector<double>& activation,
                             const std::vector<double>& unit = {});
std::vector<double> prefix_sums(const std::vector<double>& values);  // [n + 1]

// What one stage may hold, on its device, at its position in the pipeline.
struct StageLimits {
  const double* time_prefix = nullptr;  // [L + 1]: its device's layer times, summed
  // [L + 1]: its device's layer memory, summed, when it differs by device; null: LayerPrefixes'.
  const double* memory_prefix = nullptr;
  double extra_time = 0, extra_memory = 0, in_flight = 0;
  double extra_unit = 0;  // its rest's unit in flight (extra_unit_memory)
  double memory_cap = 0;  // <= 0: unlimited
};

// Whether layers [i, j) fit the stage within `bound` seconds and its memory.
bool stage_fits(const StageLimits& stage, const LayerPrefixes& layers, int i, int j, double bound);

// current[j] = the stage can end at j having started at some i with previous[i] (an end of
// the stages before it), ending no later than last_end. Returns the furthest such j, or -1.
int sweep_stage(const StageLimits& stage, const LayerPrefixes& layers,
                const std::vector<char>& previous, int last_end, double bound,
                std::vector<char>& current);

}  // namespace libai::schedule::detail
