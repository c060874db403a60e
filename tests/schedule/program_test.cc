#include "schedule/program.h"

#include <gtest/gtest.h>

#include <random>

#include "runtime/error.h"
#include "tests/schedule/reference_simulator.h"

namespace libai::schedule {
namespace {

TEST(Program, OneFOneBWarmupAndOrder) {
  PipelineProgram p = one_f_one_b(4, 6);
  EXPECT_EQ(to_string(p),
            "stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5\n"
            "stage 1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5\n"
            "stage 2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5\n"
            "stage 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5\n");
  // Stashed activations of stage s are bounded by p - s (the 1F1B memory bound).
  EXPECT_EQ(peak_stashed_activations(p), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(peak_stashed_activations(gpipe(4, 6)), (std::vector<int>{6, 6, 6, 6}));
}

// Closed forms with equal stage costs f, b and no transfer time:
//   GPipe and 1F1B both take (m + p - 1) (f + b); inference takes (m + p - 1) f.
TEST(Program, SimulatorMatchesClosedForms) {
  const int p = 4, m = 8;
  StageCosts c{{1, 1, 1, 1}, {2, 2, 2, 2}, 0.0};
  EXPECT_DOUBLE_EQ(simulate(gpipe(p, m), c).step_time, (m + p - 1) * 3.0);
  EXPECT_DOUBLE_EQ(simulate(one_f_one_b(p, m), c).step_time, (m + p - 1) * 3.0);
  Timeline inf = simulate(inference_forward(p, m), c);
  EXPECT_DOUBLE_EQ(inf.step_time, (m + p - 1) * 1.0);
  EXPECT_DOUBLE_EQ(inf.utilisation[0], double(m) / (m + p - 1));
  // A transfer time adds one hop per stage boundary on the critical path of inference.
  c.transfer = 0.5;
  EXPECT_DOUBLE_EQ(simulate(inference_forward(p, m), c).step_time, (m + p - 1) * 1.0 + 3 * 0.5);
}

TEST(Program, SlowestStageBoundsThroughput) {
  StageCosts c{{1, 4}, {0, 0}, 0.0};
  Timeline t = simulate(inference_forward(2, 10), c);
  EXPECT_DOUBLE_EQ(t.step_time, 1 + 10 * 4.0);
  EXPECT_NEAR(t.utilisation[1], 40.0 / 41.0, 1e-12);
  std::string chart = render_timeline(t, 2, 41);
  EXPECT_NE(chart.find("stage 1 |"), std::string::npos);
  EXPECT_NE(chart.find("98% busy"), std::string::npos);
}

TEST(Program, DeadlockAndMalformedProgramsAreNamed) {
  PipelineProgram p = one_f_one_b(2, 2);
  std::swap(p[1][0], p[1][2]);  // stage 1: F1 B0 F0 B1 -> B0 waits for F0 it runs later
  PipelineProgram bad = {{{ActionKind::forward, 0}, {ActionKind::forward, 1}},
                         {{ActionKind::forward, 1}, {ActionKind::forward, 0}}};
  StageCosts c{{1, 1}, {1, 1}, 0.0};
  EXPECT_NO_THROW(simulate(bad, c));  // out of order is slow, not stuck
  PipelineProgram cyclic = {{{ActionKind::forward, 0},
                             {ActionKind::backward, 0},
                             {ActionKind::forward, 1},
                             {ActionKind::backward, 1}},
                            {{ActionKind::forward, 1},
                             {ActionKind::backward, 1},
                             {ActionKind::forward, 0},
                             {ActionKind::backward, 0}}};
  try {
    simulate(cyclic, c);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocks: stage 0 at B0, stage 1 at F1"),
              std::string::npos)
        << e.what();
  }
  PipelineProgram twice = {{{ActionKind::forward, 0}, {ActionKind::forward, 0}}};
  EXPECT_THROW(simulate(twice, StageCosts{{1}, {1}, 0}), InvalidArgument);
  PipelineProgram early = {{{ActionKind::backward, 0}, {ActionKind::forward, 0}}};
  EXPECT_THROW(simulate(early, StageCosts{{1}, {1}, 0}), InvalidArgument);
}

TEST(Decode, ProgramIsStepMajorAndPrintsSteps) {
  PipelineProgram p = decode_program(2, 3, 2);
  EXPECT_EQ(to_string(p),
            "stage 0: F0.0 F1.0 F2.0 F0.1 F1.1 F2.1\n"
            "stage 1: F0.0 F1.0 F2.0 F0.1 F1.1 F2.1\n");
  EXPECT_EQ(to_string(Action{ActionKind::forward, 3, 2}), "F3.2");
  EXPECT_EQ(to_string(Action{ActionKind::forward, 3}), "F3");  // steps only when used
  // One step is one-shot inference.
  EXPECT_EQ(decode_program(3, 4, 1), inference_forward(3, 4));
  EXPECT_THROW(decode_program(2, 0, 3), InvalidArgument);
  EXPECT_THROW(decode_program(2, 3, 0), InvalidArgument);
}

// Closed form (derived by hand), p stages of forward time f, transfer c, sampling sigma,
// G groups, T steps. A group's round trip is R = p (f + c) + sigma (the hop back costs c);
// stage 0 offers G f of work per step, so steps start every P = max(G f, R) and
//   step_time = (T - 1) P + (G + p - 1) f + (p - 1) c.
// Enough groups (G f >= R) keep every stage busy: utilisation G T f / step_time -> 1.
double decode_closed_form(int p, int G, int T, double f, double c, double sigma) {
  const double R = p * (f + c) + sigma, P = std::max(G * f, R);
  return (T - 1) * P + (G + p - 1) * f + (p - 1) * c;
}

TEST(Decode, StepTimeMatchesTheClosedForm) {
  for (int p : {1, 2, 4, 5})
    for (int G : {1, 2, 3, 4, 6, 9})
      for (int T : {1, 2, 5})
        for (double c : {0.0, 0.25})
          for (double sigma : {0.0, 0.5}) {
            StageCosts costs{
                .forward = std::vector<double>(size_t(p), 1.0), .transfer = c, .sample = sigma};
            const double hop = p > 1 ? c : 0.0;  // one stage: nothing to transfer
            Timeline t = simulate(decode_program(p, G, T), costs);
            EXPECT_NEAR(t.step_time, decode_closed_form(p, G, T, 1.0, hop, sigma), 1e-9)
                << "p " << p << " G " << G << " T " << T << " c " << c << " sigma " << sigma;
            EXPECT_NEAR(t.utilisation[0], G * T / t.step_time, 1e-12);
          }
}

TEST(Decode, EnoughGroupsKeepEveryStageBusyAndFewLeaveBubbles) {
  const int p = 4, T = 16;
  StageCosts costs{.forward = std::vector<double>(p, 1.0)};
  // G >= p: (T G + p - 1) f, utilisation T G / (T G + p - 1).
  for (int G : {4, 8, 64}) {
    Timeline t = simulate(decode_program(p, G, T), costs);
    EXPECT_DOUBLE_EQ(t.step_time, T * G + p - 1.0);
    for (double u : t.utilisation) EXPECT_DOUBLE_EQ(u, T * G / (T * G + p - 1.0));
  }
  EXPECT_GT(simulate(decode_program(p, 64, T), costs).utilisation[3], 0.997);
  // G < p: every step waits for the round trip, (T p + G - 1) f; utilisation about G / p.
  Timeline two = simulate(decode_program(p, 2, T), costs);
  EXPECT_DOUBLE_EQ(two.step_time, T * p + 2 - 1.0);
  EXPECT_LT(two.utilisation[0], 0.51);
}

TEST(Decode, PrefillCostsDifferFromDecodeSteps) {
  // One group: nothing overlaps, p f0 + (T - 1) p f.
  StageCosts costs{.forward = {3, 3, 3}, .decode = {1, 1, 1}};
  EXPECT_DOUBLE_EQ(simulate(decode_program(3, 1, 4), costs).step_time, 3 * 3.0 + 3 * 3 * 1.0);
  // One step is only the prefill: inference's (m + p - 1) f0.
  EXPECT_DOUBLE_EQ(simulate(decode_program(3, 5, 1), costs).step_time, (5 + 3 - 1) * 3.0);
  // p = 2, G = 2, T = 2, f0 = 3, f = 1, by hand: stage 0 runs (0,0) 0-3, (1,0) 3-6; stage 1
  // (0,0) 3-6, (1,0) 6-9; stage 0 (0,1) 6-7, (1,1) 9-10; stage 1 (0,1) 9-10, (1,1) 10-11.
  StageCosts two{.forward = {3, 3}, .decode = {1, 1}};
  Timeline t = simulate(decode_program(2, 2, 2), two);
  EXPECT_DOUBLE_EQ(t.step_time, 11.0);
  std::vector<std::tuple<int, int, int, double>> expected = {
      {0, 0, 0, 0}, {0, 1, 0, 3}, {1, 0, 0, 3}, {1, 1, 0, 6},
      {0, 0, 1, 6}, {0, 1, 1, 9}, {1, 0, 1, 9}, {1, 1, 1, 10}};
  for (const auto& [stage, group, step, start] : expected) {
    bool found = false;
    for (const TimelineEvent& e : t.events)
      if (e.stage == stage && e.action.micro_batch == group && e.action.step == step) {
        EXPECT_DOUBLE_EQ(e.start, start) << stage << " " << group << "." << step;
        found = true;
      }
    EXPECT_TRUE(found);
  }
  EXPECT_THROW(simulate(decode_program(2, 2, 2), StageCosts{.forward = {3, 3}, .decode = {1}}),
               InvalidArgument);
}

TEST(Decode, AMissingStepIsNamed) {
  PipelineProgram p = {{{ActionKind::forward, 0, 0}, {ActionKind::forward, 0, 2}}};
  try {
    simulate(p, StageCosts{.forward = {1}});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("runs F0.2 but no stage runs F0.1"), std::string::npos)
        << e.what();
  }
  // A stage that runs a group's next step before the last stage has sent its token.
  PipelineProgram early = {{{ActionKind::forward, 0, 1}, {ActionKind::forward, 0, 0}},
                           {{ActionKind::forward, 0, 0}, {ActionKind::forward, 0, 1}}};
  try {
    simulate(early, StageCosts{.forward = {1, 1}});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("stage 0 at F0.1 waits for its input"), std::string::npos)
        << e.what();
  }
}

// The event-driven simulator against the reference recursion, on random costs.
TEST(Simulate, AgreesWithAnIndependentReplay) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.1, 3.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int p = 1 + int(rng() % 5), m = 1 + int(rng() % 6), steps = 1 + int(rng() % 3);
    PipelineProgram program;
    switch (trial % 4) {
      case 0: program = one_f_one_b(p, m); break;
      case 1: program = gpipe(p, m); break;
      case 2: program = inference_forward(p, m); break;
      case 3: program = decode_program(p, m, steps); break;
    }
    StageCosts c;
    for (int s = 0; s < p; ++s) {
      c.forward.push_back(cost(rng));
      c.backward.push_back(cost(rng));
      c.decode.push_back(cost(rng));
    }
    c.transfer = trial % 3 == 0 ? 0.0 : cost(rng) / 4;
    c.sample = trial % 2 ? 0.0 : cost(rng) / 4;
    std::vector<int> quota;  // unbounded, from buffer_quota, or random (maybe too small)
    if (trial % 3 == 1) quota = buffer_quota(program);
    if (trial % 3 == 2)
      for (int s = 0; s < p; ++s) quota.push_back(int(rng() % 4));
    const auto expected = testing::reference_simulate(program, c, quota);
    if (expected.deadlock) {
      EXPECT_THROW(simulate(program, c, quota), InvalidArgument) << "trial " << trial;
      continue;
    }
    Timeline t = quota.empty() ? simulate(program, c) : simulate(program, c, quota);
    EXPECT_NEAR(t.step_time, expected.step_time, 1e-9) << "trial " << trial;
    ASSERT_EQ(t.events.size(), expected.start.size());
    for (const TimelineEvent& e : t.events)
      EXPECT_NEAR(e.start,
                  (expected.start.at({e.stage, int(e.action.kind), e.action.micro_batch,
                                      e.action.step, e.action.chunk})),
                  1e-9)
          << "trial " << trial << " stage " << e.stage << " " << to_string(e.action);
  }
}

}  // namespace
}  // namespace libai::schedule
