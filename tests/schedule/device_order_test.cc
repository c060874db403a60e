#include "schedule/device_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "runtime/error.h"
#include "tests/schedule/every_split.h"

namespace libai::schedule {
namespace {

// Independent reference: every permutation of the devices, every contiguous split, each
// evaluated by summing layers (no prefix sums, no sweep).
double brute_force(const DeviceCosts& c) {
  const int D = c.num_devices(), L = int(c.layer_memory.size());
  const auto inf = std::numeric_limits<double>::infinity();
  return testing::best_over_orders_and_splits(D, L, [&](const auto& order, const auto& cut) {
    double worst = 0;
    for (int k = 0; k < D; ++k) {
      const int d = order[size_t(k)];
      double t =
          (k == 0 ? c.first_time[size_t(d)] : 0) + (k == D - 1 ? c.last_time[size_t(d)] : 0);
      double m = c.extra_memory[size_t(k)];
      if (k == 0 && !c.first_memory.empty()) m += c.first_memory[size_t(d)];
      if (k == D - 1 && !c.last_memory.empty()) m += c.last_memory[size_t(d)];
      for (int l = cut[size_t(k)]; l < cut[size_t(k) + 1]; ++l) {
        t += c.layer_time[size_t(d)][size_t(l)];
        m += (c.device_layer_memory.empty() ? c.layer_memory[size_t(l)]
                                            : c.device_layer_memory[size_t(d)][size_t(l)]) +
             c.in_flight[size_t(k)] * c.layer_activation_memory[size_t(l)];
      }
      if (c.memory_cap[size_t(d)] > 0 && m > c.memory_cap[size_t(d)]) return inf;
      worst = std::max(worst, t);
    }
    return worst;
  });
}

// The search against brute_force on `c`: the optimum's bottleneck, the reported split
// evaluated from scratch on the reported order, within every device's memory; or one error
// when nothing fits. Whether it fit.
bool expect_optimal(const DeviceCosts& c, int trial) {
  const double expected = brute_force(c);
  if (std::isinf(expected)) {
    EXPECT_THROW(balanced_partition_over_orders(c), InvalidArgument) << "trial " << trial;
    return false;
  }
  const OrderedPartition best = balanced_partition_over_orders(c);
  EXPECT_NEAR(best.partition.bottleneck, expected, 1e-9) << "trial " << trial;
  const CostModel cost = cost_model_for(c, best.order);
  const Partition again = evaluate(cost, best.partition.stage_of);
  EXPECT_NEAR(again.bottleneck, expected, 1e-9) << "trial " << trial;
  for (int s = 0; s < c.num_devices(); ++s) {
    if (cost.memory_cap[size_t(s)] <= 0) continue;
    EXPECT_LE(again.stage_memory[size_t(s)], cost.memory_cap[size_t(s)] * (1 + 1e-12))
        << "trial " << trial << " stage " << s;
  }
  return true;
}

TEST(DeviceOrder, ExactAgainstEveryOrderAndSplit) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> time(0.2, 2.0), mem(1.0, 3.0);
  int fitting = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int L = 3 + int(rng() % 6), D = 1 + int(rng() % std::min(L, 5));
    DeviceCosts c;
    for (int d = 0; d < D; ++d) {
      std::vector<double> row;
      const double speed = 1 + double(rng() % 3);
      for (int l = 0; l < L; ++l) row.push_back(time(rng) / speed);
      c.layer_time.push_back(row);
      c.memory_cap.push_back(trial % 4 == 0 ? 0.0 : mem(rng) * L / D * 2);
      c.first_time.push_back(time(rng) / speed);
      c.last_time.push_back(time(rng) / speed);
      c.in_flight.push_back(D - d);
      c.extra_memory.push_back(d == 0 ? mem(rng) : 0.0);
    }
    if (D > 2 && trial % 3 == 0) {  // two alike devices
      c.layer_time[2] = c.layer_time[0];
      c.memory_cap[2] = c.memory_cap[0];
      c.first_time[2] = c.first_time[0];
      c.last_time[2] = c.last_time[0];
    }
    for (int l = 0; l < L; ++l) {
      c.layer_memory.push_back(mem(rng));
      c.layer_activation_memory.push_back(mem(rng) / 4);
    }
    fitting += expect_optimal(c, trial);
  }
  EXPECT_GT(fitting, 40);
}

// Devices holding their weights in different precisions (Note [Precision per pipeline stage]):
// each device's layers weigh its own bytes and take its own times, its first / last stage
// its own embedding and head bytes. The search stays exact against every order and split.
TEST(DeviceOrder, ExactWithWeightsPerDevice) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> time(0.2, 2.0), mem(1.0, 3.0);
  const double scales[] = {1.0, 0.5, 0.15};  // f32, bf16, about q4's bytes
  int fitting = 0, mixed = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const int L = 3 + int(rng() % 6), D = 1 + int(rng() % std::min(L, 5));
    DeviceCosts c;
    std::vector<double> weights, kv;
    for (int l = 0; l < L; ++l) {
      weights.push_back(mem(rng));
      kv.push_back(mem(rng) / 8);
      c.layer_memory.push_back(weights.back() + kv.back());
      c.layer_activation_memory.push_back(0.0);
    }
    std::vector<int> precision;
    for (int d = 0; d < D; ++d) {
      precision.push_back(int(rng() % 3));
      const double scale = scales[precision.back()], speed = 1 + double(rng() % 3);
      std::vector<double> row, held;
      for (int l = 0; l < L; ++l) {
        row.push_back(time(rng) * (0.3 + 0.7 * scale) / speed);
        held.push_back(weights[size_t(l)] * scale + kv[size_t(l)]);
      }
      c.layer_time.push_back(row);
      c.device_layer_memory.push_back(held);
      c.memory_cap.push_back(trial % 5 == 0 ? 0.0 : mem(rng) * L / D);
      c.first_time.push_back(time(rng) / speed);
      c.last_time.push_back(time(rng) / speed);
      c.first_memory.push_back(mem(rng));          // an f32 embedding
      c.last_memory.push_back(mem(rng) * scale);   // a head in the device's precision
      c.in_flight.push_back(1);
      c.extra_memory.push_back(0.0);
    }
    mixed += std::any_of(precision.begin(), precision.end(),
                         [&](int p) { return p != precision[0]; });
    fitting += expect_optimal(c, trial);
  }
  EXPECT_GT(fitting, 40);
  EXPECT_GT(mixed, 60);
}

TEST(DeviceOrder, TiesKeepTheGivenOrderAndAlikeDevicesCountOnce) {
  DeviceCosts c;
  c.layer_time.assign(8, std::vector<double>(16, 1.0));
  c.layer_memory.assign(16, 1.0);
  const OrderedPartition p = balanced_partition_over_orders(c);
  EXPECT_EQ(p.order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_DOUBLE_EQ(p.partition.bottleneck, 2.0);
  // A head that only the fast device runs quickly puts that device last.
  c.layer_time[3].assign(16, 0.5);
  c.last_time.assign(8, 4.0);
  c.last_time[3] = 0.5;
  const OrderedPartition q = balanced_partition_over_orders(c);
  EXPECT_EQ(q.order.back(), 3);
}

TEST(DeviceOrder, NothingFitsIsOneError) {
  DeviceCosts c;
  c.layer_time.assign(2, std::vector<double>(4, 1.0));
  c.memory_cap = {1.5, 1.5};
  c.layer_memory.assign(4, 1.0);
  try {
    balanced_partition_over_orders(c);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no contiguous split of 4 layers over 2 stages fits the "
                                         "devices' memory in any order of the devices"),
              std::string::npos)
        << e.what();
  }
  c.memory_cap = {1.5};
  EXPECT_THROW(balanced_partition_over_orders(c), InvalidArgument);
  EXPECT_THROW(cost_model_for(DeviceCosts{.layer_time = {{1}, {1}}, .layer_memory = {1}}, {0, 0}),
               InvalidArgument);
}

}  // namespace
}  // namespace libai::schedule
