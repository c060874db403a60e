// Interleaved 1F1B (Note [Interleaved 1F1B] in schedule/program.cc) and the virtual stages the
// simulator, the quotas and the stash understand (Note [Virtual stages] in program.h).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <tuple>

#include "runtime/error.h"
#include "schedule/program.h"
#include "tests/schedule/reference_simulator.h"

namespace libai::schedule {
namespace {

// Costs per virtual stage: a device's micro-batch costs f forward and b backward, split evenly
// over its v chunks.
StageCosts chunk_costs(int p, int v, double f, double b, double transfer = 0.0) {
  return StageCosts{.forward = std::vector<double>(size_t(p * v), f / v),
                    .backward = std::vector<double>(size_t(p * v), b / v),
                    .transfer = transfer};
}

std::string error_of(const PipelineProgram& p, const StageCosts& c, const std::vector<int>& q) {
  try {
    simulate(p, c, q);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(Interleaved, MegatronOrderOnFourDevicesTwoChunks) {
  const PipelineProgram program = interleaved_one_f_one_b(4, 8, 2);
  ASSERT_EQ(program.size(), 4u);
  // Device 0: (4 - 0 - 1) 2 + (2 - 1) 4 = 10 warm-up forwards (micro-batches 0-3 through chunk
  // 0, then chunk 1, then 4-5 through chunk 0), then one forward, one backward (backwards run
  // the chunks in reverse: chunk 1 first).
  const std::string device0 = to_string(program).substr(0, to_string(program).find('\n'));
  EXPECT_EQ(device0,
            "device 0: F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 F3c1 F4c0 F5c0 F6c0 B0c1 F7c0 B1c1 "
            "F4c1 B2c1 F5c1 B3c1 F6c1 B0c0 F7c1 B1c0 B2c0 B3c0 B4c1 B5c1 B6c1 B7c1 B4c0 B5c0 "
            "B6c0 B7c0");
  // Device 3 (the last): (v - 1) p = 4 warm-up forwards; its chunk 1 is the last virtual stage.
  std::vector<std::string> first;
  for (size_t i = 0; i < 6; ++i) first.push_back(to_string(program[3][i], false, true));
  EXPECT_EQ(first, (std::vector<std::string>{"F0c0", "F1c0", "F2c0", "F3c0", "F0c1", "B0c1"}));
  EXPECT_EQ(num_chunks(program), 2);
  EXPECT_EQ(to_string(Action{ActionKind::forward, 3, 0, 1}), "F3c1");
  EXPECT_EQ(to_string(Action{ActionKind::backward, 3}), "B3");  // chunks only when used
}

// Every (micro-batch, virtual stage) is forwarded and backwarded exactly once, and in each
// device's order every action comes after what it depends on whenever that runs on the same
// device (across devices the simulator checks it: no deadlock).
TEST(Interleaved, EveryActionOnceAndDependenciesInOrder) {
  for (int p : {1, 2, 3, 4})
    for (int v : {2, 3, 4})
      for (int groups : {1, 2, 3}) {
        const int m = p * groups, V = p * v;
        const PipelineProgram program = interleaved_one_f_one_b(p, m, v);
        std::map<std::tuple<int, int, int>, int> seen;  // (kind, micro-batch, virtual stage)
        std::map<std::tuple<int, int, int>, std::pair<int, int>> where;  // -> device, position
        for (int d = 0; d < p; ++d)
          for (size_t i = 0; i < program[size_t(d)].size(); ++i) {
            const Action& a = program[size_t(d)][i];
            ASSERT_GE(a.chunk, 0);
            ASSERT_LT(a.chunk, v);
            const auto key = std::make_tuple(int(a.kind), a.micro_batch, a.chunk * p + d);
            ++seen[key];
            where[key] = {d, int(i)};
          }
        ASSERT_EQ(seen.size(), size_t(2 * m * V)) << p << " " << v << " " << m;
        for (const auto& [key, count] : seen) EXPECT_EQ(count, 1);
        const int F = int(ActionKind::forward), B = int(ActionKind::backward);
        auto before = [&](std::tuple<int, int, int> a, std::tuple<int, int, int> b) {
          const auto [da, ia] = where.at(a);
          const auto [db, ib] = where.at(b);
          return da != db || ia < ib;
        };
        for (int mb = 0; mb < m; ++mb)
          for (int k = 0; k < V; ++k) {
            if (k > 0) {
              EXPECT_TRUE(before({F, mb, k - 1}, {F, mb, k}));
            }
            if (k + 1 < V) {
              EXPECT_TRUE(before({B, mb, k + 1}, {B, mb, k}));
            }
            EXPECT_TRUE(before({F, mb, k}, {B, mb, k}));
          }
        EXPECT_NO_THROW(simulate(program, chunk_costs(p, v, 1, 2)));
      }
}

TEST(Interleaved, OneChunkIsOneFOneBAndBadSizesAreNamed) {
  EXPECT_EQ(interleaved_one_f_one_b(4, 6, 1), one_f_one_b(4, 6));  // no multiple of p needed
  try {
    interleaved_one_f_one_b(4, 6, 2);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("6 micro-batches is not a multiple of the 4 pipeline "
                                         "stages (use 8, or the 1f1b schedule)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(interleaved_one_f_one_b(4, 8, 0), InvalidArgument);
  EXPECT_THROW(interleaved_one_f_one_b(0, 8, 2), InvalidArgument);
}

// Megatron's closed form, with equal per-chunk costs f / v and b / v and no transfer time:
// (m v + p - 1) (f + b) / v; the bubble is 1 / v of 1F1B's (m + p - 1) (f + b) - m (f + b).
TEST(Interleaved, StepTimeMatchesMegatronsFormula) {
  for (double b : {0.5, 1.0, 2.0, 3.0})
    for (int p : {1, 2, 3, 4, 5})
      for (int v : {2, 3, 4})
        for (int groups : {1, 2, 4}) {
          const int m = p * groups;
          const double f = 1.0;
          const Timeline t = simulate(interleaved_one_f_one_b(p, m, v), chunk_costs(p, v, f, b));
          EXPECT_NEAR(t.step_time, (m * v + p - 1) * (f + b) / v, 1e-9)
              << "p " << p << " v " << v << " m " << m << " b " << b;
          EXPECT_NEAR(measured_bubble_fraction(t), ideal_bubble_fraction(p, m, v), 1e-9);
          // Megatron's ratio is idle time over the ideal time m (f + b).
          const double idle = t.step_time - m * (f + b);
          EXPECT_NEAR(idle / (m * (f + b)), megatron_bubble_ratio(p, m, v), 1e-9);
        }
  // Against a brute-force replay of 1F1B over the same costs with one chunk: v = 1 gives back
  // 1F1B's (m + p - 1) (f + b), which the interleaved schedule beats by (p - 1) (f + b)(1 - 1/v).
  const int p = 4, m = 8;
  const double one = simulate(one_f_one_b(p, m), chunk_costs(p, 1, 1, 2)).step_time;
  EXPECT_DOUBLE_EQ(one, (m + p - 1) * 3.0);
  for (int v : {2, 4})
    EXPECT_NEAR(one - simulate(interleaved_one_f_one_b(p, m, v), chunk_costs(p, v, 1, 2)).step_time,
                (p - 1) * 3.0 * (1 - 1.0 / v), 1e-9);
}

TEST(Bubble, FormulasAndTheMeasuredFraction) {
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(4, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(4, 8, 2), 3.0 / 19);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(megatron_bubble_ratio(4, 8), 3.0 / 8);
  EXPECT_DOUBLE_EQ(megatron_bubble_ratio(4, 8, 4), 3.0 / 32);
  EXPECT_THROW(ideal_bubble_fraction(0, 8), InvalidArgument);
  EXPECT_THROW(megatron_bubble_ratio(4, 0), InvalidArgument);
  // GPipe and 1F1B, equal costs: both idle (p - 1) / (m + p - 1) of the step.
  const StageCosts c = chunk_costs(4, 1, 1, 2);
  for (int m : {4, 8, 32}) {
    EXPECT_NEAR(measured_bubble_fraction(simulate(gpipe(4, m), c)), ideal_bubble_fraction(4, m),
                1e-12);
    EXPECT_NEAR(measured_bubble_fraction(simulate(one_f_one_b(4, m), c)),
                ideal_bubble_fraction(4, m), 1e-12);
  }
  EXPECT_DOUBLE_EQ(measured_bubble_fraction(Timeline{}), 0.0);
}

// The memory side: 1F1B's stage 0 stashes p micro-batches, GPipe's m; interleaved device 0
// stashes its warm-up plus one chunks, (p - 1) 2 + (v - 1) p + 1 (at most m v), which in
// micro-batches of its layers is p + (p - 1) / v.
TEST(Interleaved, PeakStashedActivations) {
  for (int p : {2, 4})
    for (int m : {8, 16, 32}) {
      EXPECT_EQ(peak_stashed_activations(one_f_one_b(p, m))[0], p);
      EXPECT_EQ(peak_stashed_activations(gpipe(p, m))[0], m);
      for (int v : {2, 4}) {
        const std::vector<int> stash = peak_stashed_activations(interleaved_one_f_one_b(p, m, v));
        for (int d = 0; d < p; ++d)
          EXPECT_EQ(stash[size_t(d)], std::min(m * v, (p - d - 1) * 2 + (v - 1) * p + 1))
              << "p " << p << " m " << m << " v " << v << " device " << d;
      }
    }
  // In bytes: a chunk's stash of bytes[k]. With p = 2, m = 2, v = 2, device 0's warm-up is all
  // m v = 4 forwards; device 1 warms up with 2 and holds both micro-batches of chunk 0 and
  // one of chunk 1 at most.
  const PipelineProgram small = interleaved_one_f_one_b(2, 2, 2);
  EXPECT_EQ(to_string(small),
            "device 0: F0c0 F1c0 F0c1 F1c1 B0c1 B1c1 B0c0 B1c0\n"
            "device 1: F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 B0c0 B1c0\n");
  // Virtual stages 0 and 1 are chunk 0 of devices 0 and 1; 2 and 3 chunk 1.
  EXPECT_EQ(peak_stashed_bytes(small, {10, 20, 1, 2}), (std::vector<double>{22, 42}));
  EXPECT_EQ(peak_stashed_bytes(one_f_one_b(4, 8), {1, 1, 1, 1}), (std::vector<double>{4, 3, 2, 1}));
  EXPECT_EQ(peak_stashed_bytes(inference_forward(2, 5), {3, 4}), (std::vector<double>{3, 4}));
  EXPECT_THROW(peak_stashed_bytes(small, {1, 2}), InvalidArgument);
}

// Quotas per virtual stage: with them the interleaved program runs as with unbounded
// buffers, whatever the costs (they are not always tight: with equal costs some virtual
// stages could do with a slot less); too few slots deadlock, naming the device, the chunk
// and the buffer.
TEST(Interleaved, QuotasNeverDelayTheProgram) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(0.1, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int p = 1 + int(rng() % 5), v = 2 + int(rng() % 3), m = p * (1 + int(rng() % 3));
    const PipelineProgram program = interleaved_one_f_one_b(p, m, v);
    StageCosts c;
    for (int k = 0; k < p * v; ++k) {
      c.forward.push_back(cost(rng));
      c.backward.push_back(cost(rng));
    }
    c.transfer = trial % 2 ? cost(rng) / 2 : 0.0;
    const std::vector<int> quota = buffer_quota(program);
    ASSERT_EQ(quota.size(), size_t(p * v));
    EXPECT_NEAR(simulate(program, c, quota).step_time, simulate(program, c).step_time, 1e-9)
        << "trial " << trial;
  }
  const PipelineProgram program = interleaved_one_f_one_b(4, 8, 2);
  const StageCosts c = chunk_costs(4, 2, 1, 2);
  const std::vector<int> quota = buffer_quota(program);
  EXPECT_EQ(quota, (std::vector<int>{8, 8, 8, 7, 5, 5, 4, 3}));
  std::vector<int> q = quota;
  q[4] = 1;  // device 0 chunk 1 can hold one input; device 3 chunk 0 sends it four
  const std::string e = error_of(program, c, q);
  EXPECT_NE(e.find("pipeline program deadlocks: "), std::string::npos) << e;
  EXPECT_NE(e.find("device 3 at F1c0 waits for a free slot: device 0 chunk 1's input buffer is "
                   "full (quota 1 slot, held by F0c1 until device 0 chunk 1 finishes B0c1)"),
            std::string::npos)
      << e;
  EXPECT_THROW(simulate(program, c, {8, 8, 8, 7}), InvalidArgument);  // one per virtual stage
  try {
    simulate(program, chunk_costs(4, 1, 1, 2));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("costs give 4 forward times for 8 virtual stages (4 "
                                         "devices x 2 chunks)"),
              std::string::npos)
        << e.what();
  }
}

// The event-driven simulator against the reference recursion (tests/schedule/
// reference_simulator.h), on interleaved programs with random costs, transfers and quotas.
TEST(Interleaved, SimulatorAgreesWithAnIndependentReplay) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> cost(0.1, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int p = 1 + int(rng() % 4), v = 2 + int(rng() % 3), m = p * (1 + int(rng() % 3));
    const PipelineProgram program = interleaved_one_f_one_b(p, m, v);
    StageCosts c;
    for (int k = 0; k < p * v; ++k) {
      c.forward.push_back(cost(rng));
      c.backward.push_back(cost(rng));
    }
    c.transfer = trial % 3 == 0 ? 0.0 : cost(rng) / 4;
    std::vector<int> quota;  // unbounded, from buffer_quota, or random (maybe too small)
    if (trial % 3 == 1) quota = buffer_quota(program);
    if (trial % 3 == 2)
      for (int k = 0; k < p * v; ++k) quota.push_back(1 + int(rng() % 6));
    const auto expected = testing::reference_simulate(program, c, quota);
    if (expected.deadlock) {
      EXPECT_THROW(simulate(program, c, quota), InvalidArgument) << "trial " << trial;
      continue;
    }
    const Timeline t = quota.empty() ? simulate(program, c) : simulate(program, c, quota);
    EXPECT_NEAR(t.step_time, expected.step_time, 1e-9) << "trial " << trial;
    ASSERT_EQ(t.events.size(), expected.start.size());
    std::set<int> chunks;
    for (const TimelineEvent& e : t.events) {
      chunks.insert(e.action.chunk);
      EXPECT_NEAR(e.start,
                  (expected.start.at({e.stage, int(e.action.kind), e.action.micro_batch,
                                      e.action.step, e.action.chunk})),
                  1e-9)
          << "trial " << trial << " device " << e.stage << " " << to_string(e.action);
    }
    EXPECT_EQ(int(chunks.size()), v);
  }
}

TEST(Interleaved, MalformedProgramsNameDeviceAndChunk) {
  PipelineProgram p = interleaved_one_f_one_b(2, 2, 2);
  p[1].erase(p[1].begin() + 2);  // device 1 never runs F0c1 (and so its B0c1 comes first)
  try {
    simulate(p, chunk_costs(2, 2, 1, 2));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("device 1 chunk 1 runs B0c1 before its forward"),
              std::string::npos)
        << e.what();
  }
  PipelineProgram negative = {{{ActionKind::forward, 0, 0, -1}}};
  EXPECT_THROW(simulate(negative, StageCosts{.forward = {1}}), InvalidArgument);
  // A timeline chart of an interleaved program labels its rows by device.
  const Timeline t = simulate(interleaved_one_f_one_b(2, 2, 2), chunk_costs(2, 2, 1, 2));
  EXPECT_NE(render_timeline(t, 2, 40).find("device 1 |"), std::string::npos);
}

}  // namespace
}  // namespace libai::schedule
