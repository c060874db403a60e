#include "schedule/device_order.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "runtime/error.h"
#include "schedule/partition_sweep.h"

namespace libai::schedule {
namespace {

double at(const std::vector<double>& v, int i) { return v.empty() ? 0.0 : v[size_t(i)]; }

void check_device_costs(const DeviceCosts& c) {
  const int D = c.num_devices();
  LIBAI_CHECK(D >= 1, "device order: no devices");
  const std::pair<const std::vector<double>*, const char*> per_device[] = {
      {&c.memory_cap, "memory_cap"},     {&c.first_time, "first_time"},
      {&c.last_time, "last_time"},       {&c.first_memory, "first_memory"},
      {&c.last_memory, "last_memory"}};
  for (const auto& [v, name] : per_device)
    LIBAI_CHECK(v->empty() || int(v->size()) == D, "device order: ", name, " has ", v->size(),
                " entries for ", D, " devices (or give none)");
  LIBAI_CHECK(c.device_layer_memory.empty() || int(c.device_layer_memory.size()) == D,
              "device order: device_layer_memory has ", c.device_layer_memory.size(),
              " rows for ", D, " devices (or give none)");
}

// Note [Searching device orders]
// Up to 8 devices, a depth-first search over the orders assigns devices to stages front to
// back, carrying the ends reachable so far (the sweep of Note [Exact min-max contiguous
// partition]), so orders that share a prefix share its work. Devices with identical costs are
// interchangeable: each kind is tried once per position. A branch is cut when its stages
// reach nothing, or when the devices left could not hold the layers left even at their
// longest run within the bound (time and weights alone). A complete order whose split fits
// below the best bound so far is solved exactly and, if strictly better (beyond rounding),
// becomes the best; the given order is tried first, so ties keep it.
class OrderSearch {
 public:
  explicit OrderSearch(const DeviceCosts& costs) : c_(costs) {
    D_ = c_.num_devices();
    L_ = int(c_.layer_memory.size());
    layers_ =
        detail::layer_prefixes(c_.layer_memory, c_.layer_activation_memory, c_.layer_unit_memory);
    for (int d = 0; d < D_; ++d) time_.push_back(detail::prefix_sums(c_.layer_time[size_t(d)]));
    for (const auto& row : c_.device_layer_memory) memory_.push_back(detail::prefix_sums(row));
    kind_.resize(size_t(D_));
    for (int d = 0; d < D_; ++d) {
      kind_[size_t(d)] = d;
      for (int e = 0; e < d; ++e)
        if (alike(d, e)) {
          kind_[size_t(d)] = kind_[size_t(e)];
          break;
        }
    }
  }

  OrderedPartition run() {
    std::vector<int> given(static_cast<size_t>(D_));
    std::iota(given.begin(), given.end(), 0);
    consider(given);
    // Devices all of one kind: every order is the given one.
    if (std::all_of(kind_.begin(), kind_.end(), [](int k) { return k == 0; })) {
      if (std::isinf(best_)) throw_nothing_fits();
      return best_result_;
    }
    if (D_ <= 8) {
      reach_.assign(size_t(D_), std::vector<char>(size_t(L_) + 1, 0));
      std::vector<char> start(size_t(L_) + 1, 0);
      start[0] = 1;
      order_.assign(size_t(D_), -1);
      used_.assign(size_t(D_), 0);
      update_longest_runs();
      search(0, start, 0);
    } else {
      std::vector<double> work(size_t(D_), 0.0);
      for (int d = 0; d < D_; ++d) work[size_t(d)] = time_[size_t(d)].back();
      std::vector<int> fastest = given;
      std::stable_sort(fastest.begin(), fastest.end(),
                       [&](int a, int b) { return work[size_t(a)] < work[size_t(b)]; });
      consider(fastest);
      consider(std::vector<int>(fastest.rbegin(), fastest.rend()));
    }
    if (std::isinf(best_)) throw_nothing_fits();
    return best_result_;
  }

 private:
  // What stage s holds beside its layers when device d runs it.
  double extra_memory(int s, int d) const {
    return at(c_.extra_memory, s) + (s == 0 ? at(c_.first_memory, d) : 0.0) +
           (s == D_ - 1 ? at(c_.last_memory, d) : 0.0);
  }

  bool alike(int d, int e) const {
    return c_.layer_time[size_t(d)] == c_.layer_time[size_t(e)] &&
           at(c_.memory_cap, d) == at(c_.memory_cap, e) &&
           at(c_.first_time, d) == at(c_.first_time, e) &&
           at(c_.last_time, d) == at(c_.last_time, e) &&
           at(c_.first_memory, d) == at(c_.first_memory, e) &&
           at(c_.last_memory, d) == at(c_.last_memory, e) &&
           (memory_.empty() || memory_[size_t(d)] == memory_[size_t(e)]);
  }
  // [L + 1]: device d's layer memory, summed.
  const double* memory_of(int d) const {
    return memory_.empty() ? layers_.memory.data() : memory_[size_t(d)].data();
  }
  double bound() const { return std::isinf(best_) ? best_ : best_ * (1 - 1e-9); }

  void consider(const std::vector<int>& order) {
    const CostModel cost = cost_model_for(c_, order);
    if (!fits_within(cost, bound())) return;
    Partition p = balanced_partition(cost);
    if (std::isinf(best_) || p.bottleneck < bound()) {
      best_ = p.bottleneck;
      best_result_ = {order, std::move(p)};
      update_longest_runs();
    }
  }

  // longest_[d]: the most layers device d could run as one stage within the bound.
  void update_longest_runs() {
    longest_.assign(size_t(D_), 0);
    const double b = bound(), cap_unlimited = std::numeric_limits<double>::infinity();
    for (int d = 0; d < D_; ++d) {
      const double cap = at(c_.memory_cap, d) > 0 ? at(c_.memory_cap, d) : cap_unlimited;
      const auto& t = time_[size_t(d)];
      const double* memory = memory_of(d);
      int best = 0;
      for (int i = 0, j = 0; i < L_; ++i) {
        j = std::max(j, i);
        while (j < L_ && t[size_t(j) + 1] - t[size_t(i)] <= b &&
               memory[j + 1] - memory[i] <= cap)
          ++j;
        best = std::max(best, j - i);
      }
      longest_[size_t(d)] = best;
    }
  }

  void search(int s, const std::vector<char>& previous, int furthest) {
    if (!std::isinf(best_)) {
      long capacity = furthest;
      for (int d = 0; d < D_; ++d)
        if (!used_[size_t(d)]) capacity += longest_[size_t(d)];
      if (capacity < L_) return;
    }
    std::vector<char> tried(size_t(D_), 0);  // by kind
    for (int d = 0; d < D_; ++d) {
      if (used_[size_t(d)] || tried[size_t(kind_[size_t(d)])]) continue;
      tried[size_t(kind_[size_t(d)])] = 1;
      const detail::StageLimits limits{.time_prefix = time_[size_t(d)].data(),
                                       .memory_prefix = memory_of(d),
                                       .extra_time = (s == 0 ? at(c_.first_time, d) : 0.0) +
                                                     (s == D_ - 1 ? at(c_.last_time, d) : 0.0),
                                       .extra_memory = extra_memory(s, d),
                                       .in_flight = at(c_.in_flight, s),
                                       .extra_unit = at(c_.extra_unit_memory, s),
                                       .memory_cap = at(c_.memory_cap, d)};
      const int reached = detail::sweep_stage(limits, layers_, previous, L_ - (D_ - 1 - s), bound(),
                                              reach_[size_t(s)]);
      if (reached < 0) continue;
      order_[size_t(s)] = d;
      used_[size_t(d)] = 1;
      if (s + 1 < D_)
        search(s + 1, reach_[size_t(s)], reached);
      else if (reach_[size_t(s)][size_t(L_)])
        consider(order_);
      used_[size_t(d)] = 0;
    }
  }

  [[noreturn]] void throw_nothing_fits() const {
    double total = 0, activations = 0, caps = 0;
    for (int l = 0; l < L_; ++l) {
      total += c_.layer_memory[size_t(l)];
      activations += at(c_.layer_activation_memory, l);
    }
    for (double cap : c_.memory_cap) caps += cap;
    LIBAI_THROW(InvalidArgument, "no contiguous split of ", L_, " layers over ", D_,
                " stages fits the devices' memory in any order of the devices (the layers hold ",
                format_bytes(total), " and keep ", format_bytes(activations),
                " per micro-batch in flight; the devices offer ", format_bytes(caps), " in all)");
  }

  const DeviceCosts& c_;
  int D_ = 0, L_ = 0;
  detail::LayerPrefixes layers_;
  std::vector<std::vector<double>> time_, memory_;  // [device] prefix sums (memory_: if given)
  std::vector<int> kind_;
  double best_ = std::numeric_limits<double>::infinity();
  OrderedPartition best_result_;
  std::vector<int> longest_, order_;
  std::vector<char> used_;
  std::vector<std::vector<char>> reach_;  // [stage] ends reachable, for the current prefix
};

}  // namespace

CostModel cost_model_for(const DeviceCosts& costs, const std::vector<int>& order) {
  check_device_costs(costs);
  const int S = int(order.size());
  LIBAI_CHECK(S == costs.num_devices(), "device order: ", S, " stages for ", costs.num_devices(),
              " devices");
  std::vector<char> seen(size_t(S), 0);
  CostModel cost;
  for (int s = 0; s < S; ++s) {
    const int d = order[size_t(s)];
    LIBAI_CHECK(d >= 0 && d < S && !seen[size_t(d)], "device order: stage ", s, " runs device ", d,
                ", which is out of range or runs another stage");
    seen[size_t(d)] = 1;
    cost.layer_time.push_back(costs.layer_time[size_t(d)]);
    cost.memory_cap.push_back(at(costs.memory_cap, d));
    cost.extra_time.push_back((s == 0 ? at(costs.first_time, d) : 0.0) +
                              (s == S - 1 ? at(costs.last_time, d) : 0.0));
    if (!costs.device_layer_memory.empty())
      cost.stage_layer_memory.push_back(costs.device_layer_memory[size_t(d)]);
    if (!costs.extra_memory.empty() || !costs.first_memory.empty() || !costs.last_memory.empty())
      cost.extra_memory.push_back(at(costs.extra_memory, s) +
                                  (s == 0 ? at(costs.first_memory, d) : 0.0) +
                                  (s == S - 1 ? at(costs.last_memory, d) : 0.0));
  }
  cost.layer_memory = costs.layer_memory;
  cost.layer_activation_memory = costs.layer_activation_memory;
  cost.in_flight = costs.in_flight;
  cost.layer_unit_memory = costs.layer_unit_memory;
  cost.extra_unit_memory = costs.extra_unit_memory;
  return cost;
}

OrderedPartition balanced_partition_over_orders(const DeviceCosts& costs) {
  check_device_costs(costs);
  return OrderSearch(costs).run();  // its first order checks the rest of the costs
}

}  // namespace libai::schedule
