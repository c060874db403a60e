#include "schedule/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "runtime/error.h"
#include "tests/schedule/reference_simulator.h"
#include "tests/schedule/error_of.h"

namespace libai::schedule {
namespace {

using testing::error_of;

// Two devices, six layers: device 0 takes 1 s per layer, device 1 0.5 s; embedding and head
// cost 0.5 s and 0.25 s on either; weights 10 bytes a layer, activations 1 byte.
PlanRequest two_devices() {
  PlanRequest r;
  r.pp = 2;
  r.layer_time = {std::vector<double>(6, 1.0), std::vector<double>(6, 0.5)};
  r.weight_bytes.assign(6, 10.0);
  r.activation_bytes.assign(6, 1.0);
  r.embedding = {.time = {0.5, 0.5}, .bytes = 100};
  r.head = {.time = {0.25, 0.25}, .bytes = 50};
  r.num_micro_batches = 4;
  r.items_per_micro_batch = 8;
  return r;
}

TEST(Plan, UniformTrainingByHand) {
  const Plan plan = compile_plan(two_devices());
  ASSERT_EQ(plan.stages.size(), 2u);
  const StagePlan &a = plan.stages[0], &b = plan.stages[1];
  EXPECT_EQ(plan.stage_of, (StageAssignment{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(a.first_layer, 0);
  EXPECT_EQ(a.last_layer, 2);
  EXPECT_EQ(b.first_layer, 3);
  EXPECT_EQ(a.devices, (std::vector<int>{0}));
  EXPECT_EQ(b.devices, (std::vector<int>{1}));
  EXPECT_DOUBLE_EQ(a.forward_time, 0.5 + 3 * 1.0);   // embedding + 3 layers
  EXPECT_DOUBLE_EQ(b.forward_time, 3 * 0.5 + 0.25);  // 3 layers + head
  // 1F1B on 2 stages: stage 0 keeps 2 micro-batches' activations, stage 1 one.
  EXPECT_DOUBLE_EQ(a.weight_bytes, 100 + 30);
  EXPECT_DOUBLE_EQ(a.activation_bytes, 2 * 3);
  EXPECT_DOUBLE_EQ(b.weight_bytes, 30 + 50);
  EXPECT_DOUBLE_EQ(b.activation_bytes, 1 * 3);
  EXPECT_DOUBLE_EQ(a.memory(), 136);
  EXPECT_EQ(plan.quota, (std::vector<int>{2, 2}));
  EXPECT_EQ(a.input_slots, 2);
  // The timeline against the reference replay of 1F1B with these stage costs.
  StageCosts costs{.forward = {3.5, 1.75}, .backward = {7, 3.5}};
  const auto expected = testing::reference_simulate(one_f_one_b(2, 4), costs, {2, 2});
  ASSERT_FALSE(expected.deadlock);
  EXPECT_DOUBLE_EQ(plan.timeline.step_time, expected.step_time);
  EXPECT_DOUBLE_EQ(plan.items_per_step, 4 * 8);
  EXPECT_DOUBLE_EQ(plan.throughput, 32 / expected.step_time);
  // Stage 0 is the bottleneck: 4 x (3.5 + 7) of compute.
  EXPECT_DOUBLE_EQ(plan.utilisation,
                   (4 * 10.5 / expected.step_time + 4 * 5.25 / expected.step_time) / 2);
  EXPECT_NO_THROW(validate(plan));
}

TEST(Plan, BalancedGivesTheFastDeviceMoreLayers) {
  PlanRequest r = two_devices();
  r.balance = Balance::balanced;
  const Plan plan = compile_plan(r);
  // Stage times: 0.5 + k on device 0, (6 - k) 0.5 + 0.25 on device 1: k = 2 gives 2.5 and
  // 2.25, the best of all splits; in the other order (device 1 first) the best is
  // 0.25 + 0.5 k' vs (6 - k') + 0.5... = k' = 4: 2.5 and 2.25 too: a tie keeps the given order.
  EXPECT_EQ(plan.stage_of, (StageAssignment{0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(plan.stages[0].devices, (std::vector<int>{0}));
  EXPECT_DOUBLE_EQ(std::max(plan.stages[0].forward_time, plan.stages[1].forward_time), 2.5);
}

// Two equally fast devices, the first with little memory: under 1F1B stage 0 keeps twice
// the activations, so the roomy device goes first. By hand: in the given order stage 0 can
// hold one layer (1 + 2 x 1 <= 5), bottleneck 3; reversed, 2 + 2 x 2 = 6 <= 10 on the roomy
// device and 2 + 1 x 2 = 4 <= 5 on the small one, bottleneck 2.
TEST(Plan, TheOrderOfDevicesIsPartOfTheAnswer) {
  PlanRequest r;
  r.pp = 2;
  r.layer_time = {std::vector<double>(4, 1.0), std::vector<double>(4, 1.0)};
  r.memory_cap = {5, 10};
  r.weight_bytes.assign(4, 1.0);
  r.activation_bytes.assign(4, 1.0);
  r.num_micro_batches = 4;
  r.balance = Balance::balanced;
  const Plan plan = compile_plan(r);
  EXPECT_EQ(plan.stages[0].devices, (std::vector<int>{1}));
  EXPECT_EQ(plan.stages[1].devices, (std::vector<int>{0}));
  EXPECT_EQ(plan.stage_of, (StageAssignment{0, 0, 1, 1}));
  EXPECT_DOUBLE_EQ(plan.stages[0].memory(), 6);
  EXPECT_DOUBLE_EQ(plan.stages[1].memory(), 4);
  EXPECT_NO_THROW(validate(plan));
  // The uniform split keeps the given order and does not fit: validate says where.
  r.balance = Balance::uniform;
  const std::string e = error_of([&] { validate(compile_plan(r)); });
  EXPECT_NE(e.find("plan: stage 0 (layers 0-1) does not fit device 0: it needs 6 bytes (6 B: "
                   "weights 2 B, kv cache 0 B, activations 4 B) and the device has 5 bytes (5 B)"),
            std::string::npos)
      << e;
}

// Independent reference: every order of the devices and every contiguous split.
double brute_force_plan(const PlanRequest& r) {
  const int S = r.pp, L = int(r.weight_bytes.size());
  std::vector<int> order(static_cast<size_t>(S));
  std::iota(order.begin(), order.end(), 0);
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> cut(size_t(S) + 1);
  std::function<void(int, int)> go = [&](int s, int from) {
    if (s == S) {
      if (from != L) return;
      double worst = 0;
      for (int k = 0; k < S; ++k) {
        const int d = order[size_t(k)];
        double t = 0, mem = 0;
        if (k == 0) t += r.embedding.time[size_t(d)], mem += r.embedding.bytes;
        if (k == S - 1) t += r.head.time[size_t(d)], mem += r.head.bytes;
        const double in_flight = std::min(S - k, r.num_micro_batches);
        for (int l = cut[size_t(k)]; l < cut[size_t(k) + 1]; ++l) {
          t += r.layer_time[size_t(d)][size_t(l)];
          mem += r.weight_bytes[size_t(l)] + in_flight * r.activation_bytes[size_t(l)];
        }
        if (r.memory_cap[size_t(d)] > 0 && mem > r.memory_cap[size_t(d)]) return;
        worst = std::max(worst, t);
      }
      best = std::min(best, worst);
      return;
    }
    cut[size_t(s)] = from;
    for (int to = from + 1; to <= L; ++to) {
      cut[size_t(s) + 1] = to;
      go(s + 1, to);
    }
  };
  do {
    go(0, 0);
  } while (std::next_permutation(order.begin(), order.end()));
  return best;
}

TEST(Plan, BalancedSearchMatchesBruteForceOverOrdersAndSplits) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> time(0.2, 3.0), mem(1.0, 4.0);
  int fitting = 0;
  for (int trial = 0; trial < 150; ++trial) {
    PlanRequest r;
    const int L = 2 + int(rng() % 6);
    r.pp = 1 + int(rng() % std::min(L, 4));
    r.num_micro_batches = 1 + int(rng() % 5);
    r.balance = Balance::balanced;
    for (int d = 0; d < r.pp; ++d) {
      const double speed = 1.0 + double(rng() % 3);
      std::vector<double> row;
      for (int l = 0; l < L; ++l) row.push_back(time(rng) / speed);
      r.layer_time.push_back(row);
      r.memory_cap.push_back(trial % 3 == 0 ? 0.0 : mem(rng) * L / r.pp * 3);
      r.embedding.time.push_back(time(rng) / speed);
      r.head.time.push_back(time(rng) / speed);
    }
    if (trial % 5 == 0 && r.pp > 1) r.layer_time[1] = r.layer_time[0];  // alike devices
    r.embedding.bytes = mem(rng);
    r.head.bytes = mem(rng);
    for (int l = 0; l < L; ++l) {
      r.weight_bytes.push_back(mem(rng));
      r.activation_bytes.push_back(mem(rng) / 3);
    }
    const double expected = brute_force_plan(r);
    if (std::isinf(expected)) {
      EXPECT_THROW(compile_plan(r), InvalidArgument) << "trial " << trial;
      continue;
    }
    ++fitting;
    const Plan plan = compile_plan(r);
    double worst = 0;
    for (const StagePlan& st : plan.stages) worst = std::max(worst, st.forward_time);
    EXPECT_NEAR(worst, expected, 1e-9) << "trial " << trial;
    EXPECT_NO_THROW(validate(plan)) << "trial " << trial;
  }
  EXPECT_GT(fitting, 50);
}

TEST(Plan, DataAndTensorParallelDevices) {
  // dp 2 x pp 2 x tp 2: device (d * 2 + k) * 2 + t. Every layer costs 1 s whole; device 5
  // (replica 1, slot 0, rank 1) is twice as slow and sets slot 0's pace.
  PlanRequest r;
  r.dp = 2;
  r.pp = 2;
  r.tp = 2;
  for (int d = 0; d < 8; ++d) r.layer_time.push_back(std::vector<double>(4, d == 5 ? 2.0 : 1.0));
  r.weight_bytes.assign(4, 8.0);
  r.num_micro_batches = 3;
  r.items_per_micro_batch = 4;
  const Plan plan = compile_plan(r);
  EXPECT_EQ(plan.stages[0].devices, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(plan.stages[1].devices, (std::vector<int>{2, 3, 6, 7}));
  EXPECT_DOUBLE_EQ(plan.stages[0].forward_time, 2 * 2.0 / 2);  // 2 layers at 2 s, / tp
  EXPECT_DOUBLE_EQ(plan.stages[1].forward_time, 2 * 1.0 / 2);
  EXPECT_DOUBLE_EQ(plan.stages[0].weight_bytes, 2 * 8.0 / 2);
  EXPECT_DOUBLE_EQ(plan.items_per_step, 2 * 3 * 4);  // both replicas
  EXPECT_DOUBLE_EQ(plan.throughput, 24 / plan.timeline.step_time);
  EXPECT_NO_THROW(validate(plan));
  // Balanced moves a layer off the slow slot: 1 layer at 2 s / 2 vs 3 layers at 1 s / 2.
  r.balance = Balance::balanced;
  const Plan balanced = compile_plan(r);
  double worst = 0;
  for (const StagePlan& st : balanced.stages) worst = std::max(worst, st.forward_time);
  EXPECT_DOUBLE_EQ(worst, 1.5);
}

TEST(Plan, DecodingPlan) {
  // 4 stages of 2 equal layers (0.5 s each), 8 groups of 2 sequences, 16 steps.
  PlanRequest r;
  r.pp = 4;
  r.workload = Workload::decode;
  for (int d = 0; d < 4; ++d) r.layer_time.push_back(std::vector<double>(8, 0.5));
  r.weight_bytes.assign(8, 100.0);
  r.kv_cache_bytes.assign(8, 3.0);
  r.num_micro_batches = 8;
  r.num_steps = 16;
  r.items_per_micro_batch = 2;
  const Plan plan = compile_plan(r);
  EXPECT_EQ(plan.quota, (std::vector<int>{1, 2, 2, 2}));
  EXPECT_DOUBLE_EQ(plan.stages[2].kv_cache_bytes, 2 * 8 * 3.0);  // every group's cache
  EXPECT_DOUBLE_EQ(plan.stages[2].activation_bytes, 0.0);
  // G >= p, f = 1: (T G + p - 1) f (see the decoding closed form in program_test.cc).
  EXPECT_DOUBLE_EQ(plan.timeline.step_time, 16 * 8 + 4 - 1.0);
  EXPECT_DOUBLE_EQ(plan.items_per_step, 8 * 2 * 16);  // tokens
  EXPECT_DOUBLE_EQ(plan.throughput, 256 / 131.0);
  // A prefill four times a decoding step: one group alone takes p f0 + (T - 1) p f.
  r.num_micro_batches = 1;
  r.layer_decode_time.assign(4, std::vector<double>(8, 0.125));
  const Plan one = compile_plan(r);
  EXPECT_DOUBLE_EQ(one.stages[0].decode_time, 0.25);
  EXPECT_DOUBLE_EQ(one.timeline.step_time, 4 * 1.0 + 15 * 4 * 0.25);
  EXPECT_NO_THROW(validate(one));
}

TEST(Plan, InconsistentRequestsAreNamed) {
  PlanRequest r = two_devices();
  r.tp = 2;
  EXPECT_NE(error_of([&] {
              compile_plan(r);
            }).find("layer_time covers 2 devices but dp x pp x tp = 1 x 2 x 2 = 4"),
            std::string::npos);
  r = two_devices();
  r.pp = 7;
  r.layer_time.resize(7, std::vector<double>(6, 1.0));
  EXPECT_NE(
      error_of([&] { compile_plan(r); }).find("pipeline_parallel_size 7 exceeds the 6 layers"),
      std::string::npos);
  r = two_devices();
  r.balance = Balance::custom;
  r.custom_stage_ids = {0, 0, 1, 0, 1, 1};
  EXPECT_NE(error_of([&] { compile_plan(r); }).find("custom_pipeline_stage_id[3] = 0 after 1"),
            std::string::npos);
  r.custom_stage_ids = {0, 0, 1};
  EXPECT_NE(error_of([&] { compile_plan(r); }).find("has 3 entries but pipeline_num_layers is 6"),
            std::string::npos);
  r.custom_stage_ids = {0, 0, 0, 1, 1, 1};
  EXPECT_EQ(compile_plan(r).stage_of, (StageAssignment{0, 0, 0, 1, 1, 1}));
  r.balance = Balance::uniform;
  EXPECT_NE(error_of([&] { compile_plan(r); }).find("custom stage ids given"), std::string::npos);
  r = two_devices();
  r.layer_time[1][4] = -2;
  EXPECT_NE(error_of([&] { compile_plan(r); }).find("layer_time[1][4] is -2"), std::string::npos);
  r = two_devices();
  r.num_steps = 3;
  EXPECT_NE(error_of([&] { compile_plan(r); }).find("only decoding runs several steps"),
            std::string::npos);
  r = two_devices();
  r.memory_cap = {1};
  EXPECT_NE(error_of([&] { compile_plan(r); }).find("memory_cap has 1 entries for 2 devices"),
            std::string::npos);
}

TEST(Plan, ValidateCatchesABrokenPlan) {
  const Plan good = compile_plan(two_devices());
  Plan p = good;
  p.stages[1].devices = {0};
  EXPECT_NE(error_of([&] { validate(p); }).find("device 0 is used by two stages"),
            std::string::npos);
  p = good;
  p.stage_of = {0, 1, 0, 1, 1, 1};
  EXPECT_NE(error_of([&] { validate(p); }).find("layer 2 is on stage 0 after stage 1"),
            std::string::npos);
  p = good;
  p.memory_cap = {0, 0, 0};
  EXPECT_NE(error_of([&] { validate(p); }).find("3 devices given but dp x pp x tp = 1 x 2 x 1 = 2"),
            std::string::npos);
  p = good;
  p.quota = {1, 2};  // stage 0 runs F0 F1 before B0
  EXPECT_NE(error_of([&] { validate(p); }).find("deadlocks: stage 0 at F1"), std::string::npos);
  p = good;
  p.memory_cap = {0, 80};
  EXPECT_NE(error_of([&] {
              validate(p);
            }).find("stage 1 (layers 3-5) does not fit device 1: it needs 83 bytes"),
            std::string::npos);
}

TEST(Plan, LayerTimeFromProfileIsTheRoofline) {
  // 2 GFLOP at 100 GFLOP/s: 20 ms of compute; 100 MB at 10 GB/s: 10 ms of traffic.
  EXPECT_DOUBLE_EQ(layer_time_from_profile(2e9, 1e8, 100, 10), 0.02);
  // A decoding step reads all weights for few flops: bandwidth-bound.
  EXPECT_DOUBLE_EQ(layer_time_from_profile(1e6, 5e8, 100, 10), 0.05);
  EXPECT_THROW(layer_time_from_profile(1, 1, 0, 10), InvalidArgument);
  EXPECT_THROW(layer_time_from_profile(-1, 1, 1, 10), InvalidArgument);
}

TEST(Plan, FormatBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(16.0 * 1024 * 1024 * 1024), "16.00 GiB");
}

// Big plans run; no timing is asserted (the design asks for well under a second).
TEST(Plan, AThousandDevicesAndLayers) {
  PlanRequest r;
  r.pp = 1000;
  r.layer_time.assign(1000, std::vector<double>(1000, 1e-3));
  r.weight_bytes.assign(1000, 1e6);
  r.num_micro_batches = 8;
  const Plan uniform = compile_plan(r);
  EXPECT_EQ(uniform.stages[999].first_layer, 999);
  EXPECT_NEAR(uniform.timeline.step_time, (8 + 1000 - 1) * 3e-3, 1e-9);  // 1F1B closed form
  EXPECT_NO_THROW(validate(uniform));
  r.balance = Balance::balanced;  // alike devices: one order to try
  EXPECT_EQ(compile_plan(r).stage_of, uniform.stage_of);
  // dp 10 x pp 10 x tp 10 of mixed speeds, balanced over the three orders tried beyond 8.
  PlanRequest mesh;
  mesh.dp = mesh.pp = mesh.tp = 10;
  for (int d = 0; d < 1000; ++d)
    mesh.layer_time.push_back(std::vector<double>(1000, 1e-3 * (1 + (d / 10) % 3)));
  mesh.weight_bytes.assign(1000, 1e6);
  mesh.num_micro_batches = 16;
  mesh.balance = Balance::balanced;
  const Plan mixed = compile_plan(mesh);
  EXPECT_NO_THROW(validate(mixed));
  EXPECT_EQ(mixed.stages.size(), 10u);
}

}  // namespace
}  // namespace libai::schedule
