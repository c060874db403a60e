// Stage actors in one process over synthetic stages: every packet passes every stage once,
// stages fire in program order whatever the arrival order, credits bound the buffers, and an
// error in a stage ends the job with that stage's name.
#include "tests/actors/test_system.h"
#include "actors/pipeline.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "actors/synthetic.h"

namespace libai::actors {
namespace {

using testing::System;

TEST(LocalPipeline, EveryPacketPassesEveryStageInProgramOrder) {
  System sys;
  const int stages = 4, groups = 6, steps = 3;
  PipelineLayout layout = make_layout({.dp = 1, .pp = stages, .tp = 1}, groups);
  std::mutex mutex;
  std::map<int, std::vector<std::string>> fired;  // stage -> "fire gXsY" in order
  LocalPipeline pipeline(
      *sys.system, layout,
      [](const SlotSpec&) { return std::make_shared<SyntheticCompute>(0.0005); },
      [&](const SlotSpec& slot, const std::string& event) {
        if (event.rfind("fire", 0) != 0) return;
        std::lock_guard lock(mutex);
        fired[slot.stage].push_back(event);
      });
  auto out = run_synthetic_job(pipeline.client(), layout, steps);
  auto reports = pipeline.wait(std::chrono::seconds(30));
  ASSERT_EQ(reports.size(), size_t(stages));
  for (int g = 0; g < groups; ++g)
    for (int t = 0; t < steps; ++t) EXPECT_EQ(out[size_t(g)][size_t(t)], float(t * 1000 + stages));
  // Program order: step-major over the groups, then each group's done packet.
  std::vector<std::string> expected;
  for (int t = 0; t <= steps; ++t)
    for (int g = 0; g < groups; ++g) expected.push_back(str_cat("fire g", g, "s", t));
  for (int s = 0; s < stages; ++s) EXPECT_EQ(fired[s], expected) << "stage " << s;
}

TEST(LocalPipeline, DataAndTensorParallelReplicasEachSeeTheirGroups) {
  System sys;
  PipelineLayout layout = make_layout({.dp = 2, .pp = 2, .tp = 2}, 4);
  LocalPipeline pipeline(*sys.system, layout, [](const SlotSpec&) {
    return std::make_shared<SyntheticCompute>(0.0002);
  });
  auto out = run_synthetic_job(pipeline.client(), layout, 2);
  auto reports = pipeline.wait(std::chrono::seconds(30));
  EXPECT_EQ(reports.size(), 8u);
  for (const auto& o : out) EXPECT_EQ(o, (std::vector<float>{2.0f, 1002.0f}));
  for (const auto& r : reports) EXPECT_EQ(r.actions, 2u * 2u + 2u) << r.name;  // 2 groups x 2 steps + done
}

TEST(LocalPipeline, CreditsBoundWhatAProducerHasInFlight) {
  System sys;
  const int groups = 8;
  PipelineLayout layout = make_layout({.dp = 1, .pp = 2, .tp = 1}, groups);
  ASSERT_EQ(layout.input_slots[1], 3);
  std::mutex mutex;
  int in_flight = 0, most = 0;  // packets stage 0 sent that stage 1 has not freed
  int credits = 0, done_sent = 0;
  LocalPipeline pipeline(
      *sys.system, layout,
      [](const SlotSpec& slot) {
        return std::make_shared<SyntheticCompute>(slot.stage == 0 ? 0.0 : 0.003);
      },
      [&](const SlotSpec& slot, const std::string& event) {
        if (slot.stage != 0) return;
        std::lock_guard lock(mutex);
        const bool send = event.rfind("send", 0) == 0;
        const bool done = event.size() > 5 && event.substr(event.size() - 5) == " done";
        if (send && done) ++done_sent;
        if (send && !done) most = std::max(most, ++in_flight);
        if (event == "credit") {
          --in_flight;
          ++credits;
        }
      });
  run_synthetic_job(pipeline.client(), layout, 1);
  pipeline.wait(std::chrono::seconds(30));
  EXPECT_EQ(most, 3) << "the fast stage must stop at the slow stage's three input slots";
  // Done packets take no slot: one credit back per micro-batch, none for the done packets.
  EXPECT_EQ(done_sent, groups);
  EXPECT_EQ(credits, groups);
  EXPECT_EQ(in_flight, 0);
}

// The consumer checks its producer's credits too: a producer that sends more packets than the
// consumer's input quota (a bug, or a peer that ignores the protocol) fails the stage with a
// message naming both, instead of growing the stage's buffer without bound.
TEST(StageActor, AProducerBeyondItsCreditsFailsTheStage) {
  System sys;
  caf::scoped_actor parent{*sys.system};
  StageSetup setup;
  setup.name = "stage 1";
  setup.compute = std::make_shared<SyntheticCompute>(2.0);  // holds its inputs meanwhile
  setup.groups = {0, 1, 2, 3};
  setup.parent = parent;
  const caf::actor stage = spawn_stage(*sys.system, setup);
  auto routes = std::make_shared<StageRoutes>();
  routes->upstream = {parent, 0, 1, "stage 0"};
  routes->input_slots = 2;
  parent->send(stage, routes_atom::value, StageRoutesPtr(routes));
  for (int g = 0; g < 3; ++g) {
    Packet packet{.group = g, .step = 0, .done = false, .tensors = {{"x", Tensor::zeros({1})}}};
    parent->send(stage, packet_atom::value, PacketPtr(std::make_shared<Packet>(packet)));
  }
  std::string failure;
  parent->receive([&](failed_atom, const std::string& what) { failure = what; },
                  caf::after(std::chrono::seconds(30)) >> [] {});
  EXPECT_EQ(failure,
            "stage 1: stage 0 sent 3 packets without their credits coming back; its quota is 2 "
            "input slot(s)");
}

TEST(LocalPipeline, StagesConsumeInProgramOrderWhateverTheArrivalOrder) {
  System sys;
  const int groups = 4;
  PipelineLayout layout = make_layout({.dp = 1, .pp = 2, .tp = 1}, groups);
  std::mutex mutex;
  std::vector<std::string> arrived, fired;
  LocalPipeline pipeline(
      *sys.system, layout, [](const SlotSpec&) { return std::make_shared<SyntheticCompute>(0.0); },
      [&](const SlotSpec& slot, const std::string& event) {
        if (slot.stage != 0) return;
        std::lock_guard lock(mutex);
        if (event.rfind("arrive", 0) == 0) arrived.push_back(event.substr(7));
        if (event.rfind("fire", 0) == 0) fired.push_back(event.substr(5));
      });
  auto x = [] { return Tensor::zeros({1}, DType::f32); };
  for (int g = groups - 1; g >= 0; --g)  // the last group first
    pipeline.client().submit(0, Packet{.group = g, .step = 0, .done = false, .tensors = {{"x", x()}}});
  for (int g = 0; g < groups; ++g) EXPECT_EQ(pipeline.client().wait(g).group, g);
  for (int g = 0; g < groups; ++g)
    pipeline.client().submit(0, Packet{.group = g, .step = 1, .done = true, .tensors = {}});
  pipeline.wait(std::chrono::seconds(30));
  ASSERT_GE(arrived.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(arrived.begin(), arrived.begin() + 4),
            (std::vector<std::string>{"g3s0", "g2s0", "g1s0", "g0s0"}));
  EXPECT_EQ(std::vector<std::string>(fired.begin(), fired.begin() + 4),
            (std::vector<std::string>{"g0s0", "g1s0", "g2s0", "g3s0"}));
}

class FailingCompute : public StageCompute {
 public:
  models::TensorMap forward(int group, const models::TensorMap& in) override {
    if (group == 1) LIBAI_THROW(InvalidArgument, "bad tensor in group 1");
    return in;
  }
};

TEST(LocalPipeline, AStageErrorEndsTheJobNamingTheStage) {
  System sys;
  PipelineLayout layout = make_layout({.dp = 1, .pp = 3, .tp = 1}, 2);
  LocalPipeline pipeline(*sys.system, layout, [](const SlotSpec& slot) -> std::shared_ptr<StageCompute> {
    if (slot.stage == 1) return std::make_shared<FailingCompute>();
    return std::make_shared<SyntheticCompute>(0.0001);
  });
  EXPECT_THROW(run_synthetic_job(pipeline.client(), layout, 2), CommunicationError);
  try {
    pipeline.wait(std::chrono::seconds(10));
    FAIL() << "wait() should throw";
  } catch (const CommunicationError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1: bad tensor in group 1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace libai::actors
