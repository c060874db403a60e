// Liveness bookkeeping (Note [Liveness] in actors/cluster/cluster_node.h) on made-up clocks: when node 0
// names a silent node or a stuck stage and when it must not (a slow stage, a waiting stage, its
// own pause), and what a stage actor shows of itself while it computes and waits.
#include "actors/cluster/cluster_liveness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>

#include "actors/stage_actor.h"

namespace libai::actors {
namespace {

using namespace std::chrono_literals;
using cluster::HeartbeatMonitor;
using cluster::LivenessClock;
using cluster::NodeZeroWatch;

const auto t0 = LivenessClock::time_point{} + 1000s;

wire::Heartbeat beat(int node, std::vector<wire::StageProgress> stages = {}) {
  return {0, node, std::move(stages)};
}

wire::StageProgress computing(const std::string& name, double seconds, std::uint64_t actions) {
  return {name, actions, "computing g5s0", seconds, "", 0};
}

wire::StageProgress waiting(const std::string& name, double seconds, std::uint64_t actions) {
  return {name, actions, "", 0, "a credit from stage 2", seconds};
}

// Node 0 calls verdict() every 50 ms; `until` advances the made-up clock that way.
HeartbeatMonitor::Verdict run_until(HeartbeatMonitor& monitor, LivenessClock::time_point from,
                                    LivenessClock::time_point until,
                                    const std::vector<wire::StageProgress>& local = {}) {
  for (auto now = from; now <= until; now += 50ms)
    if (auto v = monitor.verdict(now, local); !v.failure.empty()) return v;
  return {};
}

TEST(HeartbeatMonitor, NamesANodeSilentForTheTimeoutWithWhatItLastDid) {
  HeartbeatMonitor monitor(3000ms, {"", "stage 1", "stage 2"}, t0);
  monitor.heard(beat(1, {computing("stage 1", 0.2, 14)}), t0 + 1s);
  monitor.heard(beat(2, {waiting("stage 2", 0.5, 13)}), t0 + 1s);
  EXPECT_EQ(run_until(monitor, t0, t0 + 4s).failure, "") << "heard 3 s ago at most";
  monitor.heard(beat(2), t0 + 4s);  // node 1 is silent from t0 + 1 s on
  const auto v = monitor.verdict(t0 + 4020ms, {});
  EXPECT_EQ(v.silent_node, 1);
  EXPECT_EQ(v.failure,
            "node 1 (stage 1) stopped answering for 3.0 s (train.cluster.heartbeat_timeout 3.0 s); "
            "last seen: stage 1 computing g5s0 for 0.2 s, 14 action(s) done");
}

TEST(HeartbeatMonitor, ANodeThatNeverAnsweredIsNamedSo) {
  HeartbeatMonitor monitor(1000ms, {"", "stage 1"}, t0);
  const auto v = run_until(monitor, t0, t0 + 2s);
  EXPECT_EQ(v.silent_node, 1);
  EXPECT_NE(v.failure.find("it never answered a heartbeat"), std::string::npos) << v.failure;
}

TEST(HeartbeatMonitor, ASlowStageThatKeepsEndingActionsIsNotHung) {
  // Each action takes 2.5 s of a 3 s timeout; node 1 answers every 0.5 s. Its stage is on
  // one action for up to 2.5 s, forever, and the others wait for it all the time.
  HeartbeatMonitor monitor(3000ms, {"", "stage 1", "stage 2"}, t0);
  std::uint64_t actions = 0;
  for (auto now = t0; now < t0 + 60s; now += 50ms) {
    const double into = std::fmod(std::chrono::duration<double>(now - t0).count(), 2.5);
    if (into < 0.05) ++actions;
    if ((now - t0) % 500ms == 0ms) {
      monitor.heard(beat(1, {computing("stage 1", into, actions)}), now);
      monitor.heard(beat(2, {waiting("stage 2", 30.0, actions)}), now);  // waits for ages
    }
    ASSERT_EQ(monitor.verdict(now, {waiting("stage 0", 45.0, actions)}).failure, "");
  }
}

TEST(HeartbeatMonitor, AStageOnOneActionBeyondTheTimeoutIsNamed) {
  HeartbeatMonitor monitor(3000ms, {"", "stage 1", "stage 2"}, t0);
  monitor.heard(beat(1, {computing("stage 1", 2.9, 7)}), t0);
  monitor.heard(beat(2, {waiting("stage 2", 2.9, 6)}), t0);
  EXPECT_EQ(monitor.verdict(t0, {}).failure, "");
  monitor.heard(beat(1, {{"stage 1", 7, "receiving g5s0 from stage 0", 3.2, "", 0}}), t0 + 300ms);
  const auto v = monitor.verdict(t0 + 300ms, {});
  EXPECT_EQ(v.silent_node, -1);
  EXPECT_EQ(v.failure,
            "stage 1 on node 1 made no progress for 3.2 s (train.cluster.heartbeat_timeout 3.0 s): "
            "receiving g5s0 from stage 0; 7 action(s) done");
  // Node 0's own stages too.
  HeartbeatMonitor alone(3000ms, {"stage 0"}, t0);
  EXPECT_NE(alone.verdict(t0, {computing("stage 0", 3.5, 1)}).failure.find("stage 0 on node 0"),
            std::string::npos);
}

TEST(HeartbeatMonitor, ItsOwnPauseIsNotTheOthersSilence) {
  HeartbeatMonitor monitor(3000ms, {"", "stage 1"}, t0);
  monitor.heard(beat(1), t0);
  EXPECT_EQ(monitor.verdict(t0 + 1s, {}).failure, "");
  // Node 0 itself was stopped for 10 s: node 1 gets its full timeout from now.
  EXPECT_EQ(monitor.verdict(t0 + 11s, {}).failure, "");
  // It had heard nothing for 1 s before its pause: 2 s more are allowed.
  EXPECT_EQ(run_until(monitor, t0 + 11s, t0 + 12950ms).failure, "");
  EXPECT_EQ(run_until(monitor, t0 + 13s, t0 + 13200ms).silent_node, 1);
}

TEST(HeartbeatMonitor, ANodeSeenGoneIsNotJudged) {
  HeartbeatMonitor monitor(1000ms, {"", "stage 1", "stage 2"}, t0);
  monitor.forget(1);
  for (auto now = t0; now < t0 + 5s; now += 500ms) monitor.heard(beat(2), now);
  EXPECT_EQ(run_until(monitor, t0, t0 + 5s).failure, "");
}

TEST(HeartbeatMonitor, HeartbeatsAreDueSeveralTimesPerTimeout) {
  EXPECT_EQ(cluster::heartbeat_period(3000ms), 500ms);
  EXPECT_EQ(cluster::heartbeat_period(30000ms), 1000ms);
  EXPECT_EQ(cluster::heartbeat_period(60ms), 20ms);
  HeartbeatMonitor monitor(3000ms, {"", "stage 1"}, t0);
  int sent = 0;
  for (auto now = t0; now < t0 + 3s; now += 50ms) sent += monitor.due(now);
  EXPECT_EQ(sent, 6);
  EXPECT_EQ(monitor.seq(), 6u);
}

TEST(NodeZeroWatch, NamesNodeZeroAfterTheTimeoutWithWhatThisNodeWaitsFor) {
  NodeZeroWatch watch(2000ms, "node 0 (the scheduler at 10.0.0.1:29500)", t0);
  for (auto now = t0; now < t0 + 5s; now += 100ms) {
    watch.heard(now);
    ASSERT_EQ(watch.verdict(now), "");
  }
  std::string failure;
  auto now = t0 + 5s;
  for (; failure.empty() && now < t0 + 10s; now += 100ms)
    failure = watch.verdict(now, {waiting("stage 1", 1.9, 40)});
  EXPECT_GE(now - (t0 + 4900ms), 2000ms);
  EXPECT_EQ(failure,
            "node 0 (the scheduler at 10.0.0.1:29500) stopped answering for 2.1 s "
            "(train.cluster.heartbeat_timeout 2.0 s); here: stage 1 waiting for a credit from "
            "stage 2 for 1.9 s, 40 action(s) done");
  // This process's own pause (SIGSTOP of this node) restarts node 0's clock instead.
  NodeZeroWatch paused(2000ms, "node 0", t0);
  EXPECT_EQ(paused.verdict(t0 + 30s), "");
}

// A compute that blocks until the test lets it go.
class GateCompute : public StageCompute {
 public:
  models::TensorMap forward(int, const models::TensorMap& inputs) override {
    std::unique_lock lock(mutex_);
    open_.wait(lock, [&] { return released_; });
    return inputs;
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    open_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable open_;
  bool released_ = false;
};

// Polls until `ok(snapshot)` or 10 s.
template <typename F>
wire::StageProgress wait_until(const StageProgress& progress, F ok) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  wire::StageProgress now = progress.snapshot();
  while (!ok(now) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
    now = progress.snapshot();
  }
  return now;
}

TEST(StageProgress, AStageShowsWhatItComputesAndWhatItWaitsFor) {
  caf::actor_system_config config;
  caf::actor_system system(config);
  caf::scoped_actor self(system);
  ProgressBoard board;
  auto gate = std::make_shared<GateCompute>();
  StageSetup setup{.name = "stage 1", .compute = gate, .groups = {0, 1}, .parent = self};
  setup.progress = board.add("stage 1");
  const StageProgress& progress = *setup.progress;
  caf::actor stage = spawn_stage(system, setup);
  auto routes = std::make_shared<StageRoutes>();
  routes->upstream = {self, 0, 1, "stage 0"};
  routes->downstream = {self, 0, 2, "stage 2"};
  routes->downstream_slots = 1;
  self->send(stage, routes_atom::value, StageRoutesPtr(routes));

  auto p = wait_until(progress, [](const auto& s) { return !s.waiting.empty(); });
  EXPECT_EQ(p.waiting, "g0s0 from stage 0");
  EXPECT_EQ(p.doing, "");
  auto packet = [](int group) {
    return std::make_shared<const Packet>(
        Packet{.group = group,
               .step = 0,
               .done = false,
               .tensors = {{"x", Tensor::zeros({1}, DType::f32)}}});
  };
  self->send(stage, packet_atom::value, PacketPtr(packet(0)));
  p = wait_until(progress, [](const auto& s) { return s.doing_seconds > 0.05; });
  EXPECT_EQ(p.doing, "computing g0s0");
  EXPECT_EQ(p.waiting, "g1s0 from stage 0");
  EXPECT_EQ(p.actions, 0u);
  EXPECT_EQ(board.snapshot().size(), 1u);
  // g0s0 took the consumer's one slot: g1s0, there too, waits for its credit.
  self->send(stage, packet_atom::value, PacketPtr(packet(1)));
  p = wait_until(progress, [](const auto& s) { return s.waiting == "a credit from stage 2"; });
  EXPECT_EQ(p.waiting, "a credit from stage 2");
  EXPECT_EQ(p.doing, "computing g0s0");
  gate->release();
  p = wait_until(progress, [](const auto& s) { return s.actions == 1; });
  EXPECT_EQ(p.doing, "");
  EXPECT_EQ(p.waiting, "a credit from stage 2");
  // The credit comes: g1s0 runs, and the stage waits for the next step's input.
  self->send(stage, credit_atom::value, std::uint32_t(1), std::uint32_t(2));  // for link 2 (downstream)
  p = wait_until(progress, [](const auto& s) { return s.actions == 2; });
  EXPECT_EQ(p.waiting, "g0s1 from stage 0");
  self->send(stage, abort_atom::value, std::string("test over"));
}

}  // namespace
}  // namespace libai::actors
