#include "schedule/precision.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "runtime/error.h"
#include "tests/schedule/error_of.h"
#include "tests/schedule/every_split.h"

namespace libai::schedule {
namespace {

using testing::error_of;

// A decoding request, every slot in one precision: `scale` of f32's weight bytes and of its
// times (about what int8 and q4 read per step), 10 bytes of f32 weights and 1 of KV cache a
// layer; the head in the same precision, the embedding in f32.
PlanRequest priced(int pp, int layers, double scale, const std::vector<double>& caps,
                   const std::vector<double>& speed, Balance balance = Balance::balanced) {
  PlanRequest r;
  r.pp = pp;
  r.workload = Workload::decode;
  r.num_micro_batches = pp;
  r.num_steps = 4;
  r.balance = balance;
  for (int d = 0; d < pp; ++d) {
    r.layer_time.push_back(std::vector<double>(size_t(layers), scale / speed[size_t(d)]));
    r.embedding.time.push_back(0.1 / speed[size_t(d)]);
    r.head.time.push_back(0.5 * scale / speed[size_t(d)]);
  }
  r.weight_bytes.assign(size_t(layers), 10.0 * scale);
  r.kv_cache_bytes.assign(size_t(layers), 1.0 / pp);  // per group: pp groups hold 1 byte
  r.embedding.bytes = 20;
  r.head.bytes = 20 * scale;
  r.memory_cap = caps;
  return r;
}

TEST(Precision, MixTakesEachSlotsCostsFromItsPrecision) {
  const std::vector<double> caps = {0, 0, 0}, speed = {1, 2, 4};
  const std::vector<PlanRequest> by = {priced(3, 6, 1.0, caps, speed),
                                       priced(3, 6, 0.25, caps, speed)};
  const PlanRequest mixed = mix_precisions(by, {0, 1, 0});
  EXPECT_EQ(mixed.layer_time[0], by[0].layer_time[0]);
  EXPECT_EQ(mixed.layer_time[1], by[1].layer_time[1]);
  EXPECT_EQ(mixed.layer_time[2], by[0].layer_time[2]);
  EXPECT_EQ(mixed.head.time, (std::vector<double>{0.5, 0.25 * 0.5 / 2, 0.5 / 4}));
  EXPECT_EQ(mixed.slot_weight_bytes[1], by[1].weight_bytes);
  EXPECT_EQ(mixed.slot_head_bytes, (std::vector<double>{20, 5, 20}));
  // The plan holds each slot's bytes: uniform split, 2 layers a stage.
  PlanRequest uniform = mixed;
  uniform.balance = Balance::uniform;
  const Plan plan = compile_plan(uniform);
  EXPECT_DOUBLE_EQ(plan.stages[0].weight_bytes, 20 + 2 * 10.0);
  EXPECT_DOUBLE_EQ(plan.stages[1].weight_bytes, 2 * 2.5);
  EXPECT_DOUBLE_EQ(plan.stages[2].weight_bytes, 2 * 10.0 + 20);
  EXPECT_DOUBLE_EQ(plan.stages[1].kv_cache_bytes, 2 * 1.0);
  EXPECT_DOUBLE_EQ(plan.stages[1].decode_time, 2 * 0.25 / 2);
  EXPECT_NE(error_of([&] { mix_precisions(by, {0, 2, 0}); }).find("slot 1 takes precision 2 of 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { mix_precisions(by, {0, 1}); }).find("2 precisions for 3 pipeline slots"),
            std::string::npos);
  std::vector<PlanRequest> unlike = by;
  unlike[1].weight_bytes.pop_back();
  EXPECT_NE(error_of([&] { mix_precisions(unlike, {0, 0, 0}); }).find("precision 1 differs"),
            std::string::npos);
  PlanRequest training = priced(3, 6, 1.0, caps, speed);
  training.workload = Workload::train;
  training.num_steps = 1;
  training.slot_weight_bytes.assign(3, training.weight_bytes);
  EXPECT_NE(error_of([&] { compile_plan(training); }).find("training holds every stage"),
            std::string::npos);
}

// Three nodes: two of 80 bytes, one of 12. Twelve layers of 10 bytes in f32 (1 of KV cache)
// do not fit; in q4 (0.15 of the bytes) the small node holds a few, and that is the one step
// given up. The split keeps the memory of every stage.
TEST(Precision, AutoPutsTheSmallNodeInFourBit) {
  const std::vector<double> caps = {80, 80, 12}, speed = {1, 1, 1};
  const std::vector<PlanRequest> by = {priced(3, 12, 1.0, caps, speed),
                                       priced(3, 12, 0.15, caps, speed)};
  EXPECT_THROW(compile_plan(by[0]), InvalidArgument);
  const PrecisionChoice best = choose_precisions(by);
  EXPECT_EQ(best.precision_of_slot, (std::vector<int>{0, 0, 1}));
  EXPECT_TRUE(fits_memory(best.plan));
  int small_layers = 0;
  for (const StagePlan& st : best.plan.stages) {
    EXPECT_LE(st.memory(), caps[size_t(st.slot)] + 1e-9);
    if (st.slot == 2) small_layers = st.num_layers();
  }
  EXPECT_GE(small_layers, 1);
  validate(best.plan);
  // With room for everything in f32, nothing is given up.
  const std::vector<double> roomy = {0, 0, 0};
  EXPECT_EQ(choose_precisions({priced(3, 12, 1.0, roomy, speed), priced(3, 12, 0.15, roomy, speed)})
                .precision_of_slot,
            (std::vector<int>{0, 0, 0}));
  // Too little memory even in q4: the least precise plan's error.
  const std::vector<double> tiny = {5, 5, 5};
  const std::string error =
      error_of([&] { choose_precisions({priced(3, 12, 1.0, tiny, speed),
                                        priced(3, 12, 0.15, tiny, speed)}); });
  EXPECT_NE(error.find("fits the devices' memory"), std::string::npos) << error;
}

// Independent reference for `auto` on random clusters: every choice of precisions and every
// order and contiguous split, memory summed layer by layer. Each choice the reference finds a
// fitting split for compiles to a fitting plan of that optimum bottleneck (the balanced split
// on mixed precisions at ratio 1 to the optimum, above the 0.95 asked), and the chosen one
// gives up no more layer-steps than any of them, and at equal steps is no slower.
TEST(Precision, AutoAgainstEveryChoiceOrderAndSplit) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  const double scales[] = {1.0, 0.5, 0.15};
  int fitting = 0, given_up = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int pp = 2 + int(rng() % 2), L = pp + 2 + int(rng() % 4);
    std::vector<double> caps, speed;
    for (int d = 0; d < pp; ++d) {
      caps.push_back(trial % 6 == 0 ? 0.0 : u(rng) * 10.0 * L / pp);
      speed.push_back(1 + double(rng() % 3));
    }
    std::vector<PlanRequest> by;
    for (double s : scales) by.push_back(priced(pp, L, s, caps, speed));
    // Reference: per choice, the best bottleneck over orders and splits within memory.
    auto reference = [&](const std::vector<int>& choice) {
      const PlanRequest r = mix_precisions(by, choice);
      return testing::best_over_orders_and_splits(pp, L, [&](const auto& order, const auto& cut) {
        double worst = 0;
        for (int k = 0; k < pp; ++k) {
          const int slot = order[size_t(k)];
          double t = k == 0 ? r.embedding.time[size_t(slot)] * r.num_steps : 0.0;
          if (k == pp - 1) t += r.head.time[size_t(slot)] * r.num_steps;
          double m = (k == 0 ? r.slot_embedding_bytes[size_t(slot)] : 0.0) +
                     (k == pp - 1 ? r.slot_head_bytes[size_t(slot)] : 0.0);
          for (int l = cut[size_t(k)]; l < cut[size_t(k) + 1]; ++l) {
            t += r.layer_time[size_t(slot)][size_t(l)] * r.num_steps;
            m += r.slot_weight_bytes[size_t(slot)][size_t(l)] +
                 r.num_micro_batches * r.kv_cache_bytes[size_t(l)];
          }
          if (caps[size_t(slot)] > 0 && m > caps[size_t(slot)] * (1 + 1e-12))
            return std::numeric_limits<double>::infinity();
          worst = std::max(worst, t);
        }
        return worst;
      });
    };
    struct Candidate {
      std::vector<int> choice;
      int steps;
      double step_time;
    };
    std::vector<Candidate> fitting_choices;
    std::vector<int> choice(size_t(pp), 0);
    std::function<void(int)> every = [&](int k) {
      if (k == pp) {
        const double optimum = reference(choice);
        if (std::isinf(optimum)) return;
        const Plan plan = compile_plan(mix_precisions(by, choice));
        EXPECT_TRUE(fits_memory(plan)) << "trial " << trial;
        double bottleneck = 0;
        for (const StagePlan& st : plan.stages)
          bottleneck = std::max(bottleneck, st.forward_time + (by[0].num_steps - 1) * st.decode_time);
        EXPECT_GE(optimum / bottleneck, 0.95) << "trial " << trial;
        EXPECT_NEAR(bottleneck, optimum, 1e-9 * optimum) << "trial " << trial;
        fitting_choices.push_back({choice, steps_given_up(plan, choice), plan.timeline.step_time});
        return;
      }
      for (int p = 0; p < 3; ++p) choice[size_t(k)] = p, every(k + 1);
    };
    every(0);
    if (fitting_choices.empty()) {
      EXPECT_THROW(choose_precisions(by), InvalidArgument) << "trial " << trial;
      continue;
    }
    ++fitting;
    const PrecisionChoice best = choose_precisions(by);
    EXPECT_TRUE(fits_memory(best.plan));
    EXPECT_EQ(best.steps_given_up, steps_given_up(best.plan, best.precision_of_slot));
    given_up += best.steps_given_up > 0;
    for (const Candidate& other : fitting_choices) {
      EXPECT_LE(best.steps_given_up, other.steps) << "trial " << trial;
      if (other.steps != best.steps_given_up) continue;
      EXPECT_LE(best.plan.timeline.step_time, other.step_time) << "trial " << trial;
    }
  }
  EXPECT_GT(fitting, 30);
  EXPECT_GT(given_up, 10);
}

}  // namespace
}  // namespace libai::schedule
