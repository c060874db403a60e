// ZeRO's memory model (schedule/zero_memory.h) against figures computed by hand from Note [ZeRO
// memory model], the plan's per-rank model state on uneven and interleaved stages, and the
// balanced split fitting with the unit in flight (against a brute force over every split).
#include "schedule/zero_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "runtime/error.h"
#include "schedule/partition.h"
#include "schedule/plan.h"
#include "tests/schedule/error_of.h"

namespace libai::schedule {
namespace {

using testing::error_of;

void expect_terms(const ZeroMemory& m, double parameters, double gradients, double optimizer,
                  double in_flight, const std::string& what) {
  EXPECT_DOUBLE_EQ(m.parameters, parameters) << what;
  EXPECT_DOUBLE_EQ(m.gradients, gradients) << what;
  EXPECT_DOUBLE_EQ(m.optimizer, optimizer) << what;
  EXPECT_DOUBLE_EQ(m.in_flight, in_flight) << what;
  EXPECT_DOUBLE_EQ(m.total(), parameters + gradients + optimizer + in_flight) << what;
}

// Psi = 1000 parameters; a largest layer of U = 100 elements beside a rest of R = 60 (the layer
// dominates what is in flight) or of R = 400 (the rest does: R > 2 U).
TEST(ZeroMemory, FormulasByHand) {
  // Stage 0 shards nothing: 4 + 4 + 8 bytes a parameter, and over dp > 1 the all-reduce
  // buckets, a copy of every gradient (4 bytes a parameter); over one replica none.
  expect_terms(zero_state_bytes(0, 1, 1000, 100, 60), 4000, 4000, 8000, 0, "stage 0, dp 1");
  expect_terms(zero_state_bytes(0, 2, 1000, 100, 60), 4000, 4000, 8000, 4000, "stage 0, dp 2");
  expect_terms(zero_state_bytes(0, 4, 1000, 100, 400), 4000, 4000, 8000, 4000, "stage 0, dp 4");
  // Stage 1: whole parameters and gradients, and the gradient shard, m and v over dp; one
  // unit's reduce-scatter staged: 4 max(U, R).
  expect_terms(zero_state_bytes(1, 1, 1000, 100, 60), 4000, 8000, 8000, 400, "stage 1, dp 1");
  expect_terms(zero_state_bytes(1, 2, 1000, 100, 60), 4000, 6000, 4000, 400, "stage 1, dp 2");
  expect_terms(zero_state_bytes(1, 4, 1000, 100, 60), 4000, 5000, 2000, 400, "stage 1, dp 4");
  expect_terms(zero_state_bytes(1, 4, 1000, 100, 400), 4000, 5000, 2000, 1600, "stage 1, R");
  EXPECT_DOUBLE_EQ(zero_state_bytes(1, 4, 1000).total(), 8000 + 12000 / 4);
  // Stage 2: the gradients sharded too; in flight the rest's whole gradients beside a layer's
  // whole gradients and staging, 4 x 60 + 8 x 100 = 1040 (> 8 x 60), or the rest's own
  // staging, 8 x 400 = 3200 (> 4 x 400 + 8 x 100 = 2400).
  expect_terms(zero_state_bytes(2, 1, 1000, 100, 60), 4000, 4000, 8000, 1040, "stage 2, dp 1");
  expect_terms(zero_state_bytes(2, 2, 1000, 100, 60), 4000, 2000, 4000, 1040, "stage 2, dp 2");
  expect_terms(zero_state_bytes(2, 4, 1000, 100, 60), 4000, 1000, 2000, 1040, "stage 2, dp 4");
  expect_terms(zero_state_bytes(2, 4, 1000, 100, 400), 4000, 1000, 2000, 3200, "stage 2, R");
  expect_terms(zero_state_bytes(2, 4, 1000, 100), 4000, 1000, 2000, 800, "stage 2, no rest");
  // Stage 3: everything sharded; the gathered rest and layer too: 8 x 60 + 12 x 100 = 1680
  // (> 12 x 60), or 12 x 400 = 4800 (> 8 x 400 + 12 x 100 = 4400).
  expect_terms(zero_state_bytes(3, 1, 1000, 100, 60), 4000, 4000, 8000, 1680, "stage 3, dp 1");
  expect_terms(zero_state_bytes(3, 2, 1000, 100, 60), 2000, 2000, 4000, 1680, "stage 3, dp 2");
  expect_terms(zero_state_bytes(3, 4, 1000, 100, 60), 1000, 1000, 2000, 1680, "stage 3, dp 4");
  expect_terms(zero_state_bytes(3, 4, 1000, 100, 400), 1000, 1000, 2000, 4800, "stage 3, R");
  expect_terms(zero_state_bytes(3, 4, 1000, 0, 50), 1000, 1000, 2000, 600, "stage 3, rest only");
  EXPECT_DOUBLE_EQ(zero_state_bytes(3, 4, 1000).total(), 16000 / 4);

  EXPECT_NE(error_of([] { zero_state_bytes(4, 2, 1000); }).find("ZeRO stage is 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { zero_state_bytes(1, 0, 1000); }).find("data-parallel size of 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { zero_state_bytes(1, 2, -1); }).find("-1 parameters"), std::string::npos);
  EXPECT_NE(error_of([] { zero_state_bytes(2, 2, 1000, 100, -5); }).find("units of 100 and -5"),
            std::string::npos);
  EXPECT_EQ(zero_description(2, 4), "ZeRO-2 over dp 4");
  EXPECT_EQ(zero_description(0, 4), "no ZeRO");
}

// Five layers of 100, 100, 100, 300, 300 parameters on two stages {0, 0, 0, 1, 1}, an embedding
// of 50 and a head of 500 parameters; model state only (no weight bytes, activations).
PlanRequest uneven(int zero_stage, int tp, int dp = 2) {
  PlanRequest r;
  r.dp = dp;
  r.pp = 2;
  r.tp = tp;
  r.layer_time.assign(size_t(r.dp * r.pp * tp), std::vector<double>(5, 1.0));
  r.weight_bytes.assign(5, 0.0);
  r.layer_parameters = {100, 100, 100, 300, 300};
  r.embedding.parameters = 50;
  r.head.parameters = 500;
  r.zero_stage = zero_stage;
  r.num_micro_batches = 2;
  r.balance = Balance::custom;
  r.custom_stage_ids = {0, 0, 0, 1, 1};
  return r;
}

TEST(ZeroMemory, PlanCostsEachRanksModelStateOnUnevenStages) {
  // Stage 0: Psi = 50 + 300 = 350, U = 100 (a layer), R = 50 (the embedding); stage 1:
  // Psi = 600 + 500 = 1100, U = 300, R = 500 (the head).
  const Plan zero2 = compile_plan(uneven(2, 1));
  EXPECT_EQ(zero2.zero_stage, 2);
  ASSERT_EQ(zero2.rank_memory.size(), 2u);
  const RankMemory &a = zero2.rank_memory[0], &b = zero2.rank_memory[1];
  EXPECT_DOUBLE_EQ(a.parameters, 350);
  EXPECT_DOUBLE_EQ(a.largest_layer, 100);
  EXPECT_DOUBLE_EQ(a.rest_unit, 50);
  EXPECT_DOUBLE_EQ(a.largest_unit, 100);
  EXPECT_DOUBLE_EQ(b.parameters, 1100);
  EXPECT_DOUBLE_EQ(b.largest_layer, 300);
  EXPECT_DOUBLE_EQ(b.rest_unit, 500);
  EXPECT_DOUBLE_EQ(b.largest_unit, 500);
  // 4 Psi, 4 Psi / 2, 8 Psi / 2, max(4 R + 8 U, 8 R): stage 0 200 + 800 = 1000 (> 400),
  // stage 1 2000 + 2400 = 4400 (> 4000).
  expect_terms(a.model_state, 1400, 700, 1400, 1000, "stage 0");
  expect_terms(b.model_state, 4400, 2200, 4400, 4400, "stage 1");
  EXPECT_DOUBLE_EQ(a.total(), 4500);
  EXPECT_DOUBLE_EQ(zero2.stages[1].memory(), b.total());
  EXPECT_NO_THROW(validate(zero2));

  // tp 2 halves Psi and the units: stage 3, dp 2 -> 16 Psi / 2 + max(8 R + 12 U, 12 R):
  // stage 0 1400 + max(200 + 600, 300), stage 1 4400 + max(2000 + 1800, 3000).
  const Plan zero3 = compile_plan(uneven(3, 2));
  EXPECT_DOUBLE_EQ(zero3.rank_memory[0].model_state.total(), 1400 + 800);
  EXPECT_DOUBLE_EQ(zero3.rank_memory[1].model_state.total(), 4400 + 3800);
  // Stage 0 (no ZeRO) over dp 2: 16 bytes a parameter and the all-reduce buckets, 4 more.
  const Plan zero0 = compile_plan(uneven(0, 1));
  expect_terms(zero0.rank_memory[1].model_state, 4400, 4400, 8800, 4400, "no ZeRO, dp 2");
  EXPECT_DOUBLE_EQ(zero0.rank_memory[1].total(), 20 * 1100);
  // Over one replica no buckets: 16 bytes a parameter, nothing in flight.
  const Plan alone = compile_plan(uneven(0, 1, 1));
  EXPECT_DOUBLE_EQ(alone.rank_memory[1].model_state.in_flight, 0);
  EXPECT_DOUBLE_EQ(alone.rank_memory[1].total(), 16 * 1100);

  // A cap below the need names the model state's terms: 15400 bytes = 15.04 KiB.
  PlanRequest small = uneven(2, 1);
  small.memory_cap.assign(4, 5000);
  const std::string error = error_of([&] { validate(compile_plan(small)); });
  EXPECT_NE(error.find("stage 1 (layers 3-4) does not fit device 1"), std::string::npos) << error;
  EXPECT_NE(error.find("model state 15.04 KiB (ZeRO-2 over dp 2: parameters 4.30 KiB"),
            std::string::npos)
      << error;
  // Exactly the need fits; a byte less does not.
  small.memory_cap.assign(4, 15400);
  EXPECT_NO_THROW(validate(compile_plan(small)));
  small.memory_cap.assign(4, 15400 - 1);
  EXPECT_THROW(validate(compile_plan(small)), InvalidArgument);

  PlanRequest missing = uneven(1, 1);
  missing.layer_parameters.clear();
  EXPECT_NE(error_of([&] {
              compile_plan(missing);
            }).find("ZeRO stage 1 needs the layers' parameter counts"),
            std::string::npos);
  PlanRequest bad = uneven(5, 1);
  EXPECT_NE(error_of([&] { compile_plan(bad); }).find("zero_stage is 5"), std::string::npos);
}

// Interleaved over 2 ranks x 2 chunks, 8 layers of 100 parameters, ZeRO-3 over dp 2: rank 0 runs
// virtual stages 0 (layers 0-1 and the embedding of 1000) and 2 (layers 4-5), rank 1 virtual
// stages 1 (layers 2-3) and 3 (layers 6-7 and the head of 700). A rank's largest layer and
// largest rest over its chunks are in flight, 12 R when R > 1.5 U.
TEST(ZeroMemory, InterleavedRanksHoldOneUnitInFlight) {
  PlanRequest r;
  r.dp = 2;
  r.pp = 2;
  r.layer_time.assign(4, std::vector<double>(8, 1.0));
  r.weight_bytes.assign(8, 0.0);
  r.layer_parameters.assign(8, 100);
  r.embedding.parameters = 1000;
  r.head.parameters = 700;
  r.zero_stage = 3;
  r.schedule = PipelineSchedule::interleaved;
  r.num_chunks = 2;
  r.num_micro_batches = 2;
  const Plan plan = compile_plan(r);
  ASSERT_EQ(plan.stages.size(), 4u);
  EXPECT_DOUBLE_EQ(plan.rank_memory[0].parameters, 1400);
  EXPECT_DOUBLE_EQ(plan.rank_memory[0].largest_layer, 100);
  EXPECT_DOUBLE_EQ(plan.rank_memory[0].rest_unit, 1000);
  EXPECT_DOUBLE_EQ(plan.rank_memory[0].model_state.total(), 16 * 1400 / 2 + 12 * 1000);
  EXPECT_DOUBLE_EQ(plan.rank_memory[1].parameters, 1100);
  EXPECT_DOUBLE_EQ(plan.rank_memory[1].rest_unit, 700);
  EXPECT_DOUBLE_EQ(plan.rank_memory[1].model_state.total(), 16 * 1100 / 2 + 12 * 700);
  // Virtual stage 2 alone: two layers and no rest, a layer in flight (12 U).
  EXPECT_DOUBLE_EQ(plan.stages[2].model_state.total(), 16 * 200 / 2 + 12 * 100);

  // One rank with both chunks: the embedding (chunk 0's rest) and the head (chunk 1's) are two
  // units, each reduced and freed when its chunk's backward ends, so the larger of them is in
  // flight, not their sum: Psi = 400 + 1700, 16 Psi / 2 + max(8 x 1000 + 12 x 100, 12 x 1000).
  r.pp = 1;
  r.layer_time.assign(2, std::vector<double>(4, 1.0));
  r.weight_bytes.assign(4, 0.0);
  r.layer_parameters.assign(4, 100);
  const Plan one = compile_plan(r);
  ASSERT_EQ(one.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(one.rank_memory[0].parameters, 2100);
  EXPECT_DOUBLE_EQ(one.rank_memory[0].rest_unit, 1000);
  EXPECT_DOUBLE_EQ(one.rank_memory[0].largest_unit, 1000);
  EXPECT_DOUBLE_EQ(one.rank_memory[0].model_state.total(), 16 * 2100 / 2 + 12 * 1000);
}

// 8 layers of 1e6 parameters over dp 4 x pp 2, each device 30e6 bytes, no embedding or head.
// ZeRO-0 needs 20e6 a layer (16e6 and the buckets: one layer a stage at most, no split); ZeRO-1
// 11e6 a layer + 4e6 in flight (2 layers a stage at most: none); ZeRO-2 7e6 a layer + 8e6 in
// flight (3 layers: none); ZeRO-3 4e6 a layer + 12e6 in flight: 4 + 4 layers take 28e6 each.
PlanRequest eight_layers(int zero_stage, double cap) {
  PlanRequest r;
  r.dp = 4;
  r.pp = 2;
  r.layer_time.assign(8, std::vector<double>(8, 1.0));
  r.memory_cap.assign(8, cap);
  r.weight_bytes.assign(8, 0.0);
  r.layer_parameters.assign(8, 1e6);
  r.zero_stage = zero_stage;
  r.num_micro_batches = 4;
  r.balance = Balance::balanced;
  return r;
}

TEST(ZeroMemory, BalancedFitsWhatOnlyZero3Fits) {
  const Plan plan = compile_plan(eight_layers(3, 30e6));
  EXPECT_EQ(plan.stage_of, (StageAssignment{0, 0, 0, 0, 1, 1, 1, 1}));
  for (const RankMemory& m : plan.rank_memory) EXPECT_DOUBLE_EQ(m.total(), 28e6);
  EXPECT_NO_THROW(validate(plan));
  for (int zero_stage : {0, 1, 2}) {
    const std::string error = error_of([&] { compile_plan(eight_layers(zero_stage, 30e6)); });
    EXPECT_NE(error.find("no contiguous split of 8 layers over 2 stages fits the devices' memory"),
              std::string::npos)
        << "ZeRO-" << zero_stage << ": " << error;
  }
  // The unit in flight counts once a stage, not once a layer: 28e6 is exactly enough...
  EXPECT_NO_THROW(validate(compile_plan(eight_layers(3, 28e6))));
  // ...and a byte less is not (5 layers would need 32e6).
  EXPECT_NE(error_of([&] { compile_plan(eight_layers(3, 28e6 - 1)); }).find("no contiguous split"),
            std::string::npos);
}

// The balanced split with units in flight against every contiguous split, memory computed here
// as the sum of the linear terms plus the largest unit of each stage.
TEST(ZeroMemory, BalancedSplitWithUnitsMatchesBruteForce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0.5, 2.0), bytes(1.0, 10.0), unit(0.0, 20.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int L = 3 + trial % 6, S = 2 + trial % 2;
    CostModel cost;
    for (int s = 0; s < S; ++s) {
      std::vector<double> row;
      for (int l = 0; l < L; ++l) row.push_back(time(rng));
      cost.layer_time.push_back(row);
      cost.memory_cap.push_back(25 + 30 * time(rng));
      cost.extra_memory.push_back(bytes(rng));
      cost.extra_unit_memory.push_back(unit(rng));
    }
    for (int l = 0; l < L; ++l) {
      cost.layer_memory.push_back(bytes(rng));
      cost.layer_unit_memory.push_back(unit(rng));
    }
    double best = std::numeric_limits<double>::infinity();
    // Every split: stage s starts at cut[s]; enumerate cut positions as bit masks.
    for (int mask = 0; mask < (1 << (L - 1)); ++mask) {
      if (__builtin_popcount(unsigned(mask)) != S - 1) continue;
      StageAssignment stage_of(size_t(L), 0);
      for (int l = 1; l < L; ++l)
        stage_of[size_t(l)] = stage_of[size_t(l) - 1] + ((mask >> (l - 1)) & 1);
      bool fits = true;
      double bottleneck = 0;
      for (int s = 0; s < S; ++s) {
        double t = 0, m = cost.extra_memory[size_t(s)], u = cost.extra_unit_memory[size_t(s)];
        for (int l = 0; l < L; ++l) {
          if (stage_of[size_t(l)] != s) continue;
          t += cost.layer_time[size_t(s)][size_t(l)];
          m += cost.layer_memory[size_t(l)];
          u = std::max(u, cost.layer_unit_memory[size_t(l)]);
        }
        fits = fits && m + u <= cost.memory_cap[size_t(s)];
        bottleneck = std::max(bottleneck, t);
      }
      if (fits) best = std::min(best, bottleneck);
    }
    if (std::isinf(best)) {
      EXPECT_THROW(balanced_partition(cost), InvalidArgument) << "trial " << trial;
      continue;
    }
    const Partition p = balanced_partition(cost);
    EXPECT_NEAR(p.bottleneck, best, 1e-9) << "trial " << trial;
    for (int s = 0; s < S; ++s)
      EXPECT_LE(p.stage_memory[size_t(s)], cost.memory_cap[size_t(s)] * (1 + 1e-12)) << trial;
  }
}

}  // namespace
}  // namespace libai::schedule
