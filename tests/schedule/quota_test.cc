// Buffer quotas (Note [Input slots and credits]): the slots each stage's input buffer needs,
// and the credit-based replay that enforces them.
#include <gtest/gtest.h>

#include <random>

#include "runtime/error.h"
#include "schedule/program.h"

namespace libai::schedule {
namespace {

std::string error_of(const PipelineProgram& p, const StageCosts& c, const std::vector<int>& q) {
  try {
    simulate(p, c, q);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

StageCosts equal_costs(int p) {
  return StageCosts{.forward = std::vector<double>(size_t(p), 1.0),
                    .backward = std::vector<double>(size_t(p), 2.0)};
}

// Values from the Note: 1F1B stage s stashes p - s inputs (stage 0 gets its inputs from the
// driver at once; a later stage needs one more slot for the input arriving meanwhile);
// forward-only stages hold one input while computing, plus one arriving.
TEST(Quota, FromTheNote) {
  EXPECT_EQ(buffer_quota(one_f_one_b(4, 8)), (std::vector<int>{4, 4, 3, 2}));
  EXPECT_EQ(buffer_quota(one_f_one_b(4, 2)), (std::vector<int>{2, 2, 2, 2}));  // at most m
  EXPECT_EQ(buffer_quota(gpipe(4, 6)), (std::vector<int>{6, 6, 6, 6}));
  EXPECT_EQ(buffer_quota(inference_forward(4, 8)), (std::vector<int>{1, 2, 2, 2}));
  EXPECT_EQ(buffer_quota(decode_program(3, 6, 4)), (std::vector<int>{1, 2, 2}));
  EXPECT_EQ(buffer_quota(inference_forward(3, 1)), (std::vector<int>{1, 1, 1}));
  // The stash of the Note is the input buffer less the arriving slot.
  const std::vector<int> stash = peak_stashed_activations(one_f_one_b(4, 8));
  EXPECT_EQ(stash, (std::vector<int>{4, 3, 2, 1}));
}

// With its quotas a training program runs exactly as with unbounded buffers, whatever the
// costs and transfers (the producer's own order bounds what it sends ahead). A forward-only
// pipeline keeps its step time when transfers are free and every step costs the same (its
// producers may start later, never its bottleneck).
TEST(Quota, NeverDelaysTrainingNorAnEvenForwardPipeline) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> cost(0.1, 3.0);
  for (int trial = 0; trial < 400; ++trial) {
    const int p = 1 + int(rng() % 6), m = 1 + int(rng() % 9);
    const int kind = trial % 4;
    PipelineProgram program = kind == 0   ? one_f_one_b(p, m)
                              : kind == 1 ? gpipe(p, m)
                              : kind == 2 ? inference_forward(p, m)
                                          : decode_program(p, m, 1 + int(rng() % 4));
    StageCosts c;
    for (int s = 0; s < p; ++s) {
      c.forward.push_back(cost(rng));
      c.backward.push_back(cost(rng));
    }
    if (kind < 2) c.transfer = cost(rng);
    c.sample = cost(rng);
    const Timeline free = simulate(program, c);
    const Timeline bounded = simulate(program, c, buffer_quota(program));
    EXPECT_NEAR(bounded.step_time, free.step_time, 1e-9) << "trial " << trial;
    if (kind >= 2) continue;
    ASSERT_EQ(free.events.size(), bounded.events.size());
    for (size_t i = 0; i < free.events.size(); ++i)
      EXPECT_NEAR(bounded.events[i].start, free.events[i].start, 1e-9) << "trial " << trial;
  }
}

// When the prefill and the decoding steps load the stages differently, two slots can cost
// a little while the bottleneck moves; one slot per group never binds (a group has one
// input in flight), so simulate() with more slots tells what they would buy.
TEST(Quota, DecodingWithAnUnevenPrefillCanUseMoreSlots) {
  // Found by a random search (see the test above); values rounded by hand.
  const PipelineProgram program = decode_program(3, 6, 2);
  StageCosts c{.forward = {0.5, 3.0, 0.5}, .decode = {2.0, 0.5, 0.5}};
  const double free = simulate(program, c).step_time;
  const double two = simulate(program, c, buffer_quota(program)).step_time;
  EXPECT_GT(two, free + 0.1);
  EXPECT_DOUBLE_EQ(simulate(program, c, {1, 6, 6}).step_time, free);
}

// And no more: one slot fewer anywhere makes 1F1B (equal costs) slower or stuck.
TEST(Quota, OneSlotFewerIsSlowerOrStuck) {
  const int p = 4, m = 8;
  const PipelineProgram program = one_f_one_b(p, m);
  const StageCosts c = equal_costs(p);
  const double best = simulate(program, c).step_time;
  EXPECT_DOUBLE_EQ(best, (m + p - 1) * 3.0);
  for (int s = 0; s < p; ++s) {
    std::vector<int> q = buffer_quota(program);
    --q[size_t(s)];
    const std::string error = error_of(program, c, q);
    if (error != "no error") {
      EXPECT_NE(error.find("deadlocks"), std::string::npos) << error;
      continue;
    }
    EXPECT_GT(simulate(program, c, q).step_time, best + 0.5) << "stage " << s;
  }
  // Inference: one slot after stage 0 serialises neighbours. By hand, stage s starts
  // micro-batch k at (s + 2 k) f: the step takes (p + 2 m - 2) f instead of (m + p - 1) f.
  const PipelineProgram forward = inference_forward(p, m);
  EXPECT_DOUBLE_EQ(simulate(forward, c, {1, 1, 1, 1}).step_time, (p + 2 * m - 2) * 1.0);
  EXPECT_DOUBLE_EQ(simulate(forward, c, {1, 2, 2, 2}).step_time, (m + p - 1) * 1.0);
}

TEST(Quota, TooSmallDeadlocksNamingTheStage) {
  const PipelineProgram program = one_f_one_b(4, 8);
  const StageCosts c = equal_costs(4);
  // Stage 0 runs F0..F3 before B0 but can hold only one input.
  std::string e = error_of(program, c, {1, 4, 3, 2});
  EXPECT_NE(e.find("pipeline program deadlocks: stage 0 at F1"), std::string::npos) << e;
  EXPECT_NE(e.find("stage 0 at F1 waits for its input: stage 0's input buffer is full (quota 1 "
                   "slot, held by F0 until stage 0 finishes B0)"),
            std::string::npos)
      << e;
  // Stage 2's buffer of one slot: stage 1 cannot send F1 before stage 2 has run B0, which
  // needs F1 on stage 3.
  e = error_of(program, c, {4, 4, 1, 2});
  EXPECT_NE(e.find("stage 1 at F1 waits for a free slot: stage 2's input buffer is full (quota 1 "
                   "slot, held by F0 until stage 2 finishes B0)"),
            std::string::npos)
      << e;
  // A quota of 0 stops the producer at its first forward.
  e = error_of(program, c, {4, 0, 3, 2});
  EXPECT_NE(e.find("stage 0 at F0 waits for a free slot: stage 1's input quota is 0 slots"),
            std::string::npos)
      << e;
  e = error_of(inference_forward(2, 3), equal_costs(2), {0, 2});
  EXPECT_NE(e.find("stage 0 at F0 waits for its input: stage 0's input quota is 0 slots"),
            std::string::npos)
      << e;
  EXPECT_THROW(simulate(program, c, {4, 4, 3}), InvalidArgument);      // one per stage
  EXPECT_THROW(simulate(program, c, {4, 4, 3, -1}), InvalidArgument);  // slots >= 0
}

TEST(Quota, DecodingNeedsOneSlotOnStageZero) {
  // The driver writes stage 0's inputs in its order, so one slot never holds decoding back.
  const PipelineProgram program = decode_program(3, 5, 6);
  StageCosts c{.forward = {2, 1, 3}, .decode = {1, 1, 1}, .sample = 0.5};
  EXPECT_DOUBLE_EQ(simulate(program, c, {1, 2, 2}).step_time, simulate(program, c).step_time);
  std::string e = error_of(program, c, {0, 2, 2});
  EXPECT_NE(e.find("stage 0 at F0.0 waits for its input: stage 0's input quota is 0"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace libai::schedule
