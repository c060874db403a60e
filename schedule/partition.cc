#include "schedule/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>

#include "runtime/error.h"
#include "schedule/partition_sweep.h"

namespace libai::schedule {

StageAssignment uniform_partition(int num_layers, int num_stages) {
  LIBAI_CHECK(num_stages >= 1, "pipeline_parallel_size must be at least 1, got ", num_stages);
  LIBAI_CHECK(num_layers >= num_stages, "pipeline_num_layers (", num_layers,
              ") is smaller than pipeline_parallel_size (", num_stages,
              "): every stage needs at least one layer");
  StageAssignment out = StageAssignment(size_t(num_layers));
  int base = num_layers / num_stages, extra = num_layers % num_stages, layer = 0;
  for (int s = 0; s < num_stages; ++s) {
    int count = base + (s < extra ? 1 : 0);
    for (int i = 0; i < count; ++i) out[size_t(layer++)] = s;
  }
  return out;
}

StageAssignment custom_partition(const std::vector<int64_t>& stage_ids, int num_layers,
                                 int num_stages) {
  LIBAI_CHECK(int(stage_ids.size()) == num_layers, "custom_pipeline_stage_id has ",
              stage_ids.size(), " entries but pipeline_num_layers is ", num_layers);
  StageAssignment out(stage_ids.size());
  for (size_t i = 0; i < stage_ids.size(); ++i) {
    int64_t s = stage_ids[i];
    LIBAI_CHECK(s >= 0 && s < num_stages, "custom_pipeline_stage_id[", i, "] = ", s,
                " is out of range [0, ", num_stages, ")");
    if (i == 0) {
      LIBAI_CHECK(s == 0, "custom_pipeline_stage_id[0] = ", s,
                  ": the first layer must be on stage 0");
    } else {
      LIBAI_CHECK(s == stage_ids[i - 1] || s == stage_ids[i - 1] + 1, "custom_pipeline_stage_id[",
                  i, "] = ", s, " after ", stage_ids[i - 1],
                  ": stages must be contiguous and in order (each layer on the same stage as "
                  "the previous one or the next)");
    }
    out[i] = int(s);
  }
  LIBAI_CHECK(out.empty() || out.back() == num_stages - 1,
              "custom_pipeline_stage_id ends on stage ", out.empty() ? -1 : out.back(),
              " but pipeline_parallel_size is ", num_stages,
              ": every stage needs at least one layer");
  return out;
}

namespace {

double at(const std::vector<double>& v, int i) { return v.empty() ? 0.0 : v[size_t(i)]; }

void check_cost_model(const CostModel& cost) {
  const int L = cost.num_layers(), S = cost.num_stages();
  LIBAI_CHECK(S >= 1, "partition: no devices in the cost model");
  LIBAI_CHECK(L >= S, "partition: ", L, " layers cannot fill ", S,
              " stages (every stage needs at least one layer)");
  LIBAI_CHECK(int(cost.memory_cap.size()) == S, "partition: ", cost.memory_cap.size(),
              " memory caps for ", S, " stages");
  for (int s = 0; s < S; ++s)
    LIBAI_CHECK(int(cost.layer_time[size_t(s)].size()) == L, "partition: stage ", s, " has ",
                cost.layer_time[size_t(s)].size(), " layer times for ", L, " layers");
  auto sized = [](const std::vector<double>& v, int n, const char* name, const char* per) {
    LIBAI_CHECK(v.empty() || int(v.size()) == n, "partition: ", name, " has ", v.size(),
                " entries for ", n, " ", per, " (or give none)");
  };
  sized(cost.layer_activation_memory, L, "layer_activation_memory", "layers");
  sized(cost.in_flight, S, "in_flight", "stages");
  sized(cost.extra_time, S, "extra_time", "stages");
  sized(cost.extra_memory, S, "extra_memory", "stages");
  sized(cost.layer_unit_memory, L, "layer_unit_memory", "layers");
  sized(cost.extra_unit_memory, S, "extra_unit_memory", "stages");
  auto non_negative = [](const std::vector<double>& v, const char* name) {
    for (size_t i = 0; i < v.size(); ++i)
      LIBAI_CHECK(v[i] >= 0 && std::isfinite(v[i]), "partition: ", name, "[", i, "] is ", v[i],
                  "; expected a finite number >= 0");
  };
  for (const auto& row : cost.layer_time) non_negative(row, "layer_time");
  non_negative(cost.layer_memory, "layer_memory");
  LIBAI_CHECK(cost.stage_layer_memory.empty() || int(cost.stage_layer_memory.size()) == S,
              "partition: stage_layer_memory has ", cost.stage_layer_memory.size(),
              " rows for ", S, " stages (or give none)");
  for (size_t s = 0; s < cost.stage_layer_memory.size(); ++s) {
    LIBAI_CHECK(int(cost.stage_layer_memory[s].size()) == L, "partition: stage ", s, " has ",
                cost.stage_layer_memory[s].size(), " layer memories for ", L, " layers");
    non_negative(cost.stage_layer_memory[s], "stage_layer_memory");
  }
  non_negative(cost.layer_activation_memory, "layer_activation_memory");
  non_negative(cost.in_flight, "in_flight");
  non_negative(cost.extra_time, "extra_time");
  non_negative(cost.extra_memory, "extra_memory");
  non_negative(cost.layer_unit_memory, "layer_unit_memory");
  non_negative(cost.extra_unit_memory, "extra_unit_memory");
}

}  // namespace

namespace detail {

std::vector<double> prefix_sums(const std::vector<double>& values) {
  std::vector<double> out(values.size() + 1, 0.0);
  for (size_t i = 0; i < values.size(); ++i) out[i + 1] = out[i] + values[i];
  return out;
}

LayerPrefixes layer_prefixes(const std::vector<double>& memory,
                             const std::vector<double>& activation,
                             const std::vector<double>& unit) {
  LayerPrefixes out;
  out.memory = prefix_sums(memory);
  out.activation =
      activation.empty() ? std::vector<double>(memory.size() + 1, 0.0) : prefix_sums(activation);
  if (!unit.empty()) {
    out.unit.push_back(unit);
    for (size_t width = 2; width <= unit.size(); width *= 2) {
      const std::vector<double>& half = out.unit.back();
      std::vector<double> row(unit.size() - width + 1);
      for (size_t i = 0; i < row.size(); ++i) row[i] = std::max(half[i], half[i + width / 2]);
      out.unit.push_back(std::move(row));
    }
  }
  return out;
}

double LayerPrefixes::largest_unit(int i, int j) const {
  if (unit.empty()) return 0.0;
  int k = 0;
  while ((2 << k) <= j - i) ++k;  // the two ranges of 2^k cover [i, j)
  return std::max(unit[size_t(k)][size_t(i)], unit[size_t(k)][size_t(j - (1 << k))]);
}

bool stage_fits(const StageLimits& stage, const LayerPrefixes& layers, int i, int j, double bound) {
  const double t = stage.extra_time + (stage.time_prefix[j] - stage.time_prefix[i]);
  if (t > bound) return false;
  if (stage.memory_cap <= 0) return true;
  const double* memory = stage.memory_prefix ? stage.memory_prefix : layers.memory.data();
  const double m = stage.extra_memory + (memory[j] - memory[i]) +
                   stage.in_flight * (layers.activation[size_t(j)] - layers.activation[size_t(i)]) +
                   std::max(stage.extra_unit, layers.largest_unit(i, j));
  return m <= stage.memory_cap;
}

// Note [Exact min-max contiguous partition]
// For a bound B, the stages that can end where: stage s starting at layer i may end
// anywhere in (i, R_s(i)], where R_s(i) is the furthest end keeping its time <= B and its
// memory within the cap (both grow with the end and shrink with the start, so R_s is
// non-decreasing and two pointers find it in O(L)). reach[s][j] = layers [0, j) fit on
// stages [0, s]: a sweep over i in O(L) per stage. Feasibility is monotone in B, so
// bisecting B over the ordered doubles (at most 64 steps) finds the smallest feasible B
// exactly: the optimum, O(64 S L) in all. (An O(S L^2) programme over (stage, end) gives
// the same value; it is too slow for a thousand layers and stages.)
int sweep_stage(const StageLimits& stage, const LayerPrefixes& layers,
                const std::vector<char>& previous, int last_end, double bound,
                std::vector<char>& current) {
  std::fill(current.begin(), current.end(), 0);
  int furthest = -1, reached = -1, j = 0;
  for (int i = 0; i < last_end; ++i) {
    j = std::max(j, i);
    while (j < last_end && stage_fits(stage, layers, i, j + 1, bound)) ++j;
    if (previous[size_t(i)]) furthest = std::max(furthest, j);
    // End i + 1 is reachable when some reachable start <= i reaches at least that far.
    if (furthest >= i + 1) {
      current[size_t(i) + 1] = 1;
      reached = i + 1;
    }
  }
  return reached;
}

}  // namespace detail

namespace {

class Feasibility {
 public:
  explicit Feasibility(const CostModel& cost)
      : cost_(cost),
        layers_(detail::layer_prefixes(cost.layer_memory, cost.layer_activation_memory,
                                       cost.layer_unit_memory)) {
    const int S = cost.num_stages();
    for (int s = 0; s < S; ++s) time_.push_back(detail::prefix_sums(cost.layer_time[size_t(s)]));
    for (const auto& row : cost.stage_layer_memory) memory_.push_back(detail::prefix_sums(row));
    for (int s = 0; s < S; ++s)
      limits_.push_back({.time_prefix = time_[size_t(s)].data(),
                         .memory_prefix = memory_.empty() ? nullptr : memory_[size_t(s)].data(),
                         .extra_time = at(cost.extra_time, s),
                         .extra_memory = at(cost.extra_memory, s),
                         .in_flight = at(cost.in_flight, s),
                         .extra_unit = at(cost.extra_unit_memory, s),
                         .memory_cap = cost.memory_cap[size_t(s)]});
  }

  // Fills reach_ for bound `bound`; returns whether all layers fit.
  bool check(double bound) {
    const int L = cost_.num_layers(), S = cost_.num_stages();
    reach_.resize(size_t(S), std::vector<char>(size_t(L) + 1, 0));
    std::vector<char> start(size_t(L) + 1, 0);
    start[0] = 1;
    for (int s = 0; s < S; ++s) {
      const int last_end = L - (S - 1 - s);  // leave a layer for each later stage
      const std::vector<char>& previous = s == 0 ? start : reach_[size_t(s) - 1];
      if (detail::sweep_stage(limits_[size_t(s)], layers_, previous, last_end, bound,
                              reach_[size_t(s)]) < 0)
        return false;
    }
    return reach_[size_t(S) - 1][size_t(L)] != 0;
  }

  // After a successful check(bound): a split within it (later stages take the fewest layers).
  StageAssignment split(double bound) const {
    const int L = cost_.num_layers(), S = cost_.num_stages();
    StageAssignment stage_of = StageAssignment(size_t(L));
    int j = L;
    for (int s = S - 1; s >= 0; --s) {
      int i = 0;
      if (s > 0) {
        i = j - 1;
        while (i >= s && !(reach_[size_t(s) - 1][size_t(i)] &&
                           detail::stage_fits(limits_[size_t(s)], layers_, i, j, bound)))
          --i;
        LIBAI_ASSERT(i >= s, "partition: no start for stage ", s, " ending at ", j);
      }
      for (int l = i; l < j; ++l) stage_of[size_t(l)] = s;
      j = i;
    }
    return stage_of;
  }

 private:
  const CostModel& cost_;
  detail::LayerPrefixes layers_;
  std::vector<std::vector<double>> time_, memory_;  // [stage] prefix sums
  std::vector<detail::StageLimits> limits_;
  std::vector<std::vector<char>> reach_;
};

std::uint64_t bits_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
double double_of(std::uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

}  // namespace

Partition evaluate(const CostModel& cost, const StageAssignment& stage_of) {
  LIBAI_CHECK(int(stage_of.size()) == cost.num_layers(), "partition: ", stage_of.size(),
              " stage ids for ", cost.num_layers(), " layers");
  Partition p;
  p.stage_of = stage_of;
  const int S = cost.num_stages();
  p.stage_time.assign(size_t(S), 0.0);
  p.stage_memory.assign(size_t(S), 0.0);
  std::vector<double> activation(size_t(S), 0.0), unit(size_t(S), 0.0);
  for (int s = 0; s < S; ++s) {
    p.stage_time[size_t(s)] = at(cost.extra_time, s);
    p.stage_memory[size_t(s)] = at(cost.extra_memory, s);
    unit[size_t(s)] = at(cost.extra_unit_memory, s);
  }
  for (size_t l = 0; l < stage_of.size(); ++l) {
    const int s = stage_of[l];
    LIBAI_CHECK(s >= 0 && s < S, "partition: layer ", l, " on stage ", s, " of ", S);
    p.stage_time[size_t(s)] += cost.layer_time[size_t(s)][l];
    p.stage_memory[size_t(s)] += cost.stage_layer_memory.empty()
                                     ? cost.layer_memory[l]
                                     : cost.stage_layer_memory[size_t(s)][l];
    activation[size_t(s)] += at(cost.layer_activation_memory, int(l));
    unit[size_t(s)] = std::max(unit[size_t(s)], at(cost.layer_unit_memory, int(l)));
  }
  for (int s = 0; s < S; ++s)
    p.stage_memory[size_t(s)] += at(cost.in_flight, s) * activation[size_t(s)] + unit[size_t(s)];
  p.bottleneck = *std::max_element(p.stage_time.begin(), p.stage_time.end());
  return p;
}

bool fits_within(const CostModel& cost, double bottleneck) {
  check_cost_model(cost);
  return Feasibility(cost).check(bottleneck);
}

Partition balanced_partition(const CostModel& cost) {
  check_cost_model(cost);
  const int L = cost.num_layers(), S = cost.num_stages();
  Feasibility feasible(cost);
  if (!feasible.check(std::numeric_limits<double>::infinity())) {
    double total = 0, caps = 0, largest = 0;
    for (int l = 0; l < L; ++l) {
      double held = cost.stage_layer_memory.empty() ? cost.layer_memory[size_t(l)]
                                                    : std::numeric_limits<double>::infinity();
      for (const auto& row : cost.stage_layer_memory) held = std::min(held, row[size_t(l)]);
      const double need = held + at(cost.layer_activation_memory, l);
      total += need;
      largest = std::max(largest, need);
    }
    for (double c : cost.memory_cap) caps += c;
    LIBAI_THROW(InvalidArgument, "no contiguous split of ", L, " layers over ", S,
                " stages fits the devices' memory (the layers need ", std::llround(total),
                " bytes with one micro-batch in flight, the devices offer ", std::llround(caps),
                " in all; the largest layer needs ", std::llround(largest), ")");
  }
  // Bisect over the doubles in [0, hi]: non-negative doubles order as their bit patterns.
  double hi = 0;
  for (int l = 0; l < L; ++l) {
    double slowest = 0;
    for (int s = 0; s < S; ++s) slowest = std::max(slowest, cost.layer_time[size_t(s)][size_t(l)]);
    hi += slowest;
  }
  double extra = 0;
  for (double e : cost.extra_time) extra = std::max(extra, e);
  hi = (hi + extra) * (1 + 1e-9) + 1e-300;  // above any split's bottleneck, whatever the rounding
  std::uint64_t lo_bits = 0, hi_bits = bits_of(hi);
  if (feasible.check(0.0)) {
    hi_bits = 0;
  } else {
    LIBAI_ASSERT(feasible.check(hi), "partition: the bound on the bottleneck is infeasible");
    while (hi_bits - lo_bits > 1) {
      const std::uint64_t mid = lo_bits + (hi_bits - lo_bits) / 2;
      if (feasible.check(double_of(mid)))
        hi_bits = mid;
      else
        lo_bits = mid;
    }
  }
  const double best = double_of(hi_bits);
  LIBAI_ASSERT(feasible.check(best), "partition: the optimum is infeasible");
  return evaluate(cost, feasible.split(best));
}

StageAssignment memory_proportional_partition(const CostModel& cost) {
  check_cost_model(cost);
  const int L = cost.num_layers(), S = cost.num_stages();
  double total = 0;
  for (double c : cost.memory_cap) total += std::max(c, 0.0);
  LIBAI_CHECK(total > 0, "memory-proportional split needs positive memory caps");
  StageAssignment out = StageAssignment(size_t(L));
  // Largest-remainder rounding of L * cap / total, at least one layer per stage.
  std::vector<int> count = std::vector<int>(size_t(S));
  std::vector<std::pair<double, int>> remainder;
  int assigned = 0;
  for (int s = 0; s < S; ++s) {
    double share = double(L) * cost.memory_cap[size_t(s)] / total;
    count[size_t(s)] = std::max(1, int(std::floor(share)));
    assigned += count[size_t(s)];
    remainder.push_back({share - std::floor(share), s});
  }
  std::sort(remainder.rbegin(), remainder.rend());
  for (size_t k = 0; assigned < L; k = (k + 1) % remainder.size(), ++assigned)
    count[size_t(remainder[k].second)]++;
  for (int s = S - 1; assigned > L; s = (s + S - 1) % S)
    if (count[size_t(s)] > 1) count[size_t(s)]--, assigned--;
  int layer = 0;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < count[size_t(s)]; ++i) out[size_t(layer++)] = s;
  return out;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 5) v /= 1024, ++u;
  char out[48];
  std::snprintf(out, sizeof out, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return out;
}

std::string describe(const StageAssignment& stage_of) {
  std::string out;
  int start = 0;
  for (size_t l = 1; l <= stage_of.size(); ++l) {
    if (l == stage_of.size() || stage_of[l] != stage_of[l - 1]) {
      if (!out.empty()) out += ", ";
      out += "stage " + std::to_string(stage_of[l - 1]) + ": layers " + std::to_string(start) +
             "-" + std::to_string(int(l) - 1);
      start = int(l);
    }
  }
  return out;
}

}  // namespace libai::schedule
