#include "schedule/program.h"

#include <gtest/gtest.h>

#include "runtime/error.h"

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

}  // namespace
}  // namespace libai::schedule
