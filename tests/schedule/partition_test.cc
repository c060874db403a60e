#include "schedule/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>

#include "runtime/error.h"

namespace libai::schedule {
namespace {

TEST(Partition, UniformMatchesLibaiCounts) {
  EXPECT_EQ(uniform_partition(12, 4), (StageAssignment{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}));
  EXPECT_EQ(uniform_partition(5, 2), (StageAssignment{0, 0, 0, 1, 1}));
  EXPECT_THROW(uniform_partition(3, 4), InvalidArgument);
}

TEST(Partition, CustomIsValidatedWithThePosition) {
  EXPECT_EQ(custom_partition({0, 0, 1, 1, 1}, 5, 2), (StageAssignment{0, 0, 1, 1, 1}));
  auto message = [](const std::vector<int64_t>& ids, int layers, int stages) {
    try {
      custom_partition(ids, layers, stages);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({0, 0, 1}, 4, 2).find("3 entries but pipeline_num_layers is 4"),
            std::string::npos);
  EXPECT_NE(message({0, 2, 2, 3}, 4, 4).find("custom_pipeline_stage_id[1] = 2"), std::string::npos);
  EXPECT_NE(message({0, 1, 0, 1}, 4, 2).find("[2] = 0"), std::string::npos);
  EXPECT_NE(message({0, 0, 1, 5}, 4, 2).find("out of range"), std::string::npos);
  EXPECT_NE(message({0, 0, 0, 0}, 4, 2).find("every stage needs"), std::string::npos);
}

// Independent reference: try every composition of L layers into S non-empty stages.
double brute_force_bottleneck(const CostModel& cost) {
  const int L = cost.num_layers(), S = cost.num_stages();
  double best = std::numeric_limits<double>::infinity();
  StageAssignment a = StageAssignment(size_t(L));
  std::function<void(int, int)> go = [&](int layer, int stage) {
    if (layer == L) {
      if (stage != S - 1) return;
      Partition p = evaluate(cost, a);
      for (int s = 0; s < S; ++s)
        if (cost.memory_cap[size_t(s)] > 0 &&
            p.stage_memory[size_t(s)] > cost.memory_cap[size_t(s)])
          return;
      best = std::min(best, p.bottleneck);
      return;
    }
    a[size_t(layer)] = stage;
    go(layer + 1, stage);
    if (layer > 0 && stage + 1 < S) {
      a[size_t(layer)] = stage + 1;
      go(layer + 1, stage + 1);
    }
  };
  a[0] = 0;
  go(1, 0);
  if (L == 1 && S == 1) best = evaluate(cost, a).bottleneck;
  return best;
}

TEST(Partition, BalancedIsOptimalAgainstBruteForce) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> time(0.5, 3.0), mem(1.0, 4.0);
  for (int trial = 0; trial < 200; ++trial) {
    int L = 2 + int(rng() % 9), S = 1 + int(rng() % std::min(L, 4));
    CostModel cost;
    std::vector<double> base = std::vector<double>(size_t(L));
    for (auto& t : base) t = time(rng);
    for (int s = 0; s < S; ++s) {
      double slowdown = 1.0 + double(rng() % 4);  // mixed devices
      std::vector<double> row;
      for (double t : base) row.push_back(t * slowdown);
      cost.layer_time.push_back(row);
      cost.memory_cap.push_back(trial % 3 == 0 ? 0.0 : mem(rng) * double(L) / double(S) * 1.5);
    }
    for (int l = 0; l < L; ++l) cost.layer_memory.push_back(mem(rng));
    double expected = brute_force_bottleneck(cost);
    if (std::isinf(expected)) {
      EXPECT_THROW(balanced_partition(cost), InvalidArgument) << "trial " << trial;
      continue;
    }
    Partition p = balanced_partition(cost);
    EXPECT_NEAR(p.bottleneck, expected, 1e-9) << "trial " << trial << ": " << describe(p.stage_of);
  }
}

TEST(Partition, BalancedGivesTheSlowDeviceFewerLayers) {
  // 12 equal layers, device 1 four times slower: the optimum puts ~4/5 on device 0.
  CostModel cost;
  cost.layer_time = {std::vector<double>(12, 1.0), std::vector<double>(12, 4.0)};
  cost.layer_memory = std::vector<double>(12, 1.0);
  cost.memory_cap = {0.0, 0.0};
  Partition p = balanced_partition(cost);
  EXPECT_EQ(std::count(p.stage_of.begin(), p.stage_of.end(), 0), 10);
  EXPECT_DOUBLE_EQ(p.bottleneck, 10.0);
  // Uniform and memory-proportional both leave device 0 idle most of the time.
  EXPECT_DOUBLE_EQ(evaluate(cost, uniform_partition(12, 2)).bottleneck, 24.0);
}

TEST(Partition, MemoryCapsBindAndImpossibleSplitsAreNamed) {
  CostModel cost;
  cost.layer_time = {std::vector<double>(6, 1.0), std::vector<double>(6, 1.0)};
  cost.layer_memory = std::vector<double>(6, 10.0);
  cost.memory_cap = {20.0, 0.0};  // stage 0 holds at most 2 layers
  Partition p = balanced_partition(cost);
  EXPECT_EQ(p.stage_of, (StageAssignment{0, 0, 1, 1, 1, 1}));
  cost.memory_cap = {20.0, 20.0};
  try {
    balanced_partition(cost);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("fits the devices' memory"), std::string::npos);
  }
}

TEST(Partition, MemoryProportionalBaseline) {
  CostModel cost;
  cost.layer_time = {std::vector<double>(12, 1.0), std::vector<double>(12, 1.0),
                     std::vector<double>(12, 1.0)};
  cost.layer_memory = std::vector<double>(12, 1.0);
  cost.memory_cap = {100, 100, 200};
  StageAssignment a = memory_proportional_partition(cost);
  EXPECT_EQ(std::count(a.begin(), a.end(), 2), 6);
  EXPECT_EQ(std::count(a.begin(), a.end(), 0), 3);
  EXPECT_EQ(describe(a), "stage 0: layers 0-2, stage 1: layers 3-5, stage 2: layers 6-11");
}

// The brute force again, now with the optional costs: the embedding and head on the end
// stages (extra time and memory) and activations multiplied by the micro-batches in flight.
TEST(Partition, BalancedWithExtrasAndActivationsIsOptimal) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> time(0.5, 3.0), mem(1.0, 4.0);
  int feasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    int L = 2 + int(rng() % 9), S = 1 + int(rng() % std::min(L, 5));
    CostModel cost;
    for (int s = 0; s < S; ++s) {
      std::vector<double> row;
      for (int l = 0; l < L; ++l) row.push_back(time(rng));  // any device x layer costs
      cost.layer_time.push_back(row);
      cost.memory_cap.push_back(trial % 4 == 0 ? 0.0 : mem(rng) * double(L) / double(S) * 2.5);
      cost.in_flight.push_back(double(S - s));  // 1F1B
      cost.extra_time.push_back(0.0);
      cost.extra_memory.push_back(0.0);
    }
    cost.extra_time[0] += time(rng);
    cost.extra_time[size_t(S) - 1] += time(rng);
    cost.extra_memory[0] += mem(rng);
    for (int l = 0; l < L; ++l) {
      cost.layer_memory.push_back(mem(rng));
      cost.layer_activation_memory.push_back(mem(rng) / 4);
    }
    double expected = brute_force_bottleneck(cost);
    if (std::isinf(expected)) {
      EXPECT_THROW(balanced_partition(cost), InvalidArgument) << "trial " << trial;
      EXPECT_FALSE(fits_within(cost, std::numeric_limits<double>::infinity()));
      continue;
    }
    ++feasible;
    Partition p = balanced_partition(cost);
    EXPECT_NEAR(p.bottleneck, expected, 1e-9) << "trial " << trial << ": " << describe(p.stage_of);
    for (int s = 0; s < S; ++s) {
      const double cap = cost.memory_cap[size_t(s)];
      EXPECT_TRUE(cap <= 0 || p.stage_memory[size_t(s)] <= cap * (1 + 1e-12)) << "stage " << s;
    }
    EXPECT_TRUE(fits_within(cost, expected * (1 + 1e-9)));
    EXPECT_FALSE(fits_within(cost, expected * (1 - 1e-9)));
  }
  EXPECT_GT(feasible, 100);  // the trials exercise both outcomes
}

TEST(Partition, EvaluateCountsExtrasAndActivations) {
  CostModel cost;
  cost.layer_time = {{1, 2, 3}, {4, 5, 6}};
  cost.layer_memory = {10, 20, 30};
  cost.memory_cap = {0, 0};
  cost.layer_activation_memory = {1, 2, 3};
  cost.in_flight = {2, 1};
  cost.extra_time = {0.5, 0.25};
  cost.extra_memory = {100, 200};
  Partition p = evaluate(cost, {0, 0, 1});
  EXPECT_EQ(p.stage_time, (std::vector<double>{0.5 + 1 + 2, 0.25 + 6}));
  EXPECT_EQ(p.stage_memory, (std::vector<double>{100 + 30 + 2 * 3, 200 + 30 + 1 * 3}));
  EXPECT_DOUBLE_EQ(p.bottleneck, 6.25);
}

TEST(Partition, BadCostModelsAreNamed) {
  auto message = [](const CostModel& cost) {
    try {
      balanced_partition(cost);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CostModel cost;
  cost.layer_time = {{1, 1, 1}, {1, 1, 1}};
  cost.layer_memory = {1, 1, 1};
  cost.memory_cap = {0, 0};
  EXPECT_EQ(message(cost), "no error");
  CostModel bad = cost;
  bad.in_flight = {1};
  EXPECT_NE(message(bad).find("in_flight has 1 entries for 2 stages"), std::string::npos);
  bad = cost;
  bad.layer_time[1][2] = -1;
  EXPECT_NE(message(bad).find("layer_time[2] is -1"), std::string::npos) << message(bad);
  bad = cost;
  bad.layer_memory.push_back(1);
  EXPECT_NE(message(bad).find("stage 0 has 3 layer times for 4 layers"), std::string::npos);
  bad = cost;
  bad.memory_cap = {0};
  EXPECT_NE(message(bad).find("1 memory caps for 2 stages"), std::string::npos);
}

// A thousand layers on a thousand stages: the bisection is O(64 S L), no timing asserted.
TEST(Partition, AThousandLayersOnAThousandStages) {
  const int L = 1000, S = 1000;
  CostModel cost;
  for (int s = 0; s < S; ++s)
    cost.layer_time.push_back(std::vector<double>(size_t(L), 1.0 + (s % 3)));
  cost.layer_memory.assign(size_t(L), 1.0);
  cost.memory_cap.assign(size_t(S), 0.0);
  Partition p = balanced_partition(cost);
  EXPECT_DOUBLE_EQ(p.bottleneck, 3.0);  // one layer each; the slowest device costs 3
}

}  // namespace
}  // namespace libai::schedule
