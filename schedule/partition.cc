#include "schedule/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "runtime/error.h"

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

Partition evaluate(const CostModel& cost, const StageAssignment& stage_of) {
  Partition p;
  p.stage_of = stage_of;
  p.stage_time.assign(size_t(cost.num_stages()), 0.0);
  p.stage_memory.assign(size_t(cost.num_stages()), 0.0);
  for (size_t l = 0; l < stage_of.size(); ++l) {
    int s = stage_of[l];
    p.stage_time[size_t(s)] += cost.layer_time[size_t(s)][l];
    p.stage_memory[size_t(s)] += cost.layer_memory[l];
  }
  p.bottleneck = *std::max_element(p.stage_time.begin(), p.stage_time.end());
  return p;
}

namespace {

void check_cost_model(const CostModel& cost) {
  const int L = cost.num_layers(), S = cost.num_stages();
  LIBAI_CHECK(S >= 1, "balanced partition: no devices in the cost model");
  LIBAI_CHECK(L >= S, "balanced partition: ", L, " layers cannot fill ", S, " stages");
  LIBAI_CHECK(int(cost.memory_cap.size()) == S, "balanced partition: ", cost.memory_cap.size(),
              " memory caps for ", S, " stages");
  for (int s = 0; s < S; ++s)
    LIBAI_CHECK(int(cost.layer_time[size_t(s)].size()) == L, "balanced partition: stage ", s,
                " has ", cost.layer_time[size_t(s)].size(), " layer times for ", L, " layers");
}

}  // namespace

// Note [Exact min-max contiguous partition]
// best[s][j] = the smallest bottleneck placing layers [0, j) on stages [0, s]. Stage s takes
// layers [i, j) for some i; prefix sums give each stage's time and memory in O(1), so the
// programme costs O(S * L^2): for 1000 layers and 64 stages, 64M steps, well under a second.
Partition balanced_partition(const CostModel& cost) {
  check_cost_model(cost);
  const int L = cost.num_layers(), S = cost.num_stages();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> mem_prefix(size_t(L) + 1, 0.0);
  for (int l = 0; l < L; ++l)
    mem_prefix[size_t(l) + 1] = mem_prefix[size_t(l)] + cost.layer_memory[size_t(l)];
  std::vector<std::vector<double>> time_prefix(size_t(S), std::vector<double>(size_t(L) + 1, 0.0));
  for (int s = 0; s < S; ++s)
    for (int l = 0; l < L; ++l)
      time_prefix[size_t(s)][size_t(l) + 1] =
          time_prefix[size_t(s)][size_t(l)] + cost.layer_time[size_t(s)][size_t(l)];
  auto fits = [&](int s, int i, int j) {
    double cap = cost.memory_cap[size_t(s)];
    return cap <= 0 || mem_prefix[size_t(j)] - mem_prefix[size_t(i)] <= cap;
  };
  std::vector<std::vector<double>> best(size_t(S), std::vector<double>(size_t(L) + 1, inf));
  std::vector<std::vector<int>> cut(size_t(S), std::vector<int>(size_t(L) + 1, -1));
  for (int j = 1; j <= L - (S - 1); ++j)
    if (fits(0, 0, j)) best[0][size_t(j)] = time_prefix[0][size_t(j)];
  for (int s = 1; s < S; ++s) {
    for (int j = s + 1; j <= L - (S - 1 - s); ++j) {
      for (int i = s; i < j; ++i) {
        if (best[size_t(s) - 1][size_t(i)] == inf || !fits(s, i, j)) continue;
        double t = std::max(best[size_t(s) - 1][size_t(i)],
                            time_prefix[size_t(s)][size_t(j)] - time_prefix[size_t(s)][size_t(i)]);
        if (t < best[size_t(s)][size_t(j)]) {
          best[size_t(s)][size_t(j)] = t;
          cut[size_t(s)][size_t(j)] = i;
        }
      }
    }
  }
  if (best[size_t(S) - 1][size_t(L)] == inf) {
    double total = mem_prefix[size_t(L)], caps = 0;
    for (double c : cost.memory_cap) caps += c;
    LIBAI_THROW(InvalidArgument, "no contiguous split of ", L, " layers over ", S,
                " stages fits the devices' memory (model needs ", total, " bytes, devices offer ",
                caps, " in all; the largest layer needs ",
                *std::max_element(cost.layer_memory.begin(), cost.layer_memory.end()), ")");
  }
  StageAssignment stage_of = StageAssignment(size_t(L));
  int j = L;
  for (int s = S - 1; s >= 0; --s) {
    int i = s == 0 ? 0 : cut[size_t(s)][size_t(j)];
    for (int l = i; l < j; ++l) stage_of[size_t(l)] = s;
    j = i;
  }
  return evaluate(cost, stage_of);
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
