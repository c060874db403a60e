// Liveness of `libai-actor run` over real processes (Note [Liveness] in actors/cluster_node.h):
// a pipeline of 3 nodes where the first, the middle or the last node is killed, a node is
// stopped (SIGSTOP, as a stuck driver or a swapping host looks), a node is 20x slower than the
// others, or one action outlasts the heartbeat timeout. Every other node must end with one
// error naming the node within the documented time (kill: 5 s; stop: the timeout + 5 s), a slow
// node must not be declared hung, and after every test every process has ended on its own (a
// stopped node once continued, too), was reaped, and left no shared-memory segment behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "tests/bin/cluster.h"

namespace libai::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// The shared-memory segments of this project (POSIX shm_open names live in /dev/shm).
std::set<std::string> shm_segments() {
  std::set<std::string> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/dev/shm", error))
    if (entry.path().filename().string().rfind("libai", 0) == 0)
      out.insert(entry.path().filename().string());
  return out;
}

struct Job {
  int nodes = 3;
  double layer_seconds = 0.01;
  int layers_per_stage = 1;
  int steps = 10000;  // runs for minutes unless something ends it
  double heartbeat_timeout = 3.0;
  std::string slowdown = "null";  // train.cluster.device_slowdown
  std::string addr = "127.0.0.1";
};

class Liveness : public ::testing::Test {
 protected:
  void SetUp() override { shm_before_ = shm_segments(); }

  // After every test: every node ended by itself and was reaped, no segment was left.
  void TearDown() override {
    for (int r = 0; r < launched_; ++r)
      EXPECT_GE(cluster_.wait(r, 0ms), 0) << "node " << r << " was still running";
    std::set<std::string> leaked;
    for (const auto& name : shm_segments())
      if (!shm_before_.count(name)) leaked.insert(name);
    EXPECT_TRUE(leaked.empty()) << "leaked /dev/shm/" << *leaked.begin();
  }

  std::string config(const Job& job) {
    const std::string yaml = str_cat(
        "_base_: [", LIBAI_SOURCE_DIR, "/configs/default.yaml]\n",
        "train:\n  dist: {pipeline_parallel_size: ", job.nodes,
        ", pipeline_num_layers: ", job.nodes * job.layers_per_stage, "}\n",
        "  cluster: {nodes: ", job.nodes, ", token: test-token, join_timeout: 30.0, ",
        "heartbeat_timeout: ", job.heartbeat_timeout, ", device_slowdown: ", job.slowdown, "}\n",
        "job:\n  _target_: synthetic\n  layer_seconds: ", job.layer_seconds,
        "\n  num_micro_batches: ", job.nodes, "\n  steps: ", job.steps, "\n");
    const std::string path = cluster_.dir() + "/liveness.yaml";
    std::ofstream(path) << yaml;
    return path;
  }

  void launch(const Job& job) {
    const std::string path = config(job);
    const int port = free_port();
    for (int r = 0; r < job.nodes; ++r)
      cluster_.launch({"run", path, "--node-rank", std::to_string(r), "--port",
                       std::to_string(port), "--addr", job.addr});
    launched_ = job.nodes;
  }

  // Waits until node 0 logged that the last node joined, then lets the job run a moment.
  void wait_until_running(int nodes) {
    ASSERT_TRUE(cluster_.wait_for_log(0, str_cat("node ", nodes - 1, " ("), 30s)) << cluster_.err(0);
    std::this_thread::sleep_for(1500ms);
    for (int r = 0; r < nodes; ++r)
      ASSERT_EQ(cluster_.wait(r, 0ms), -1) << "node " << r << " ended early:\n" << cluster_.err(r);
  }

  // Node r ended with an error within `within` of `since`, and its log says every piece of
  // `expected`.
  void expect_failed(int r, Clock::time_point since, std::chrono::milliseconds within,
                     const std::vector<std::string>& expected) {
    EXPECT_EQ(cluster_.wait(r, within - std::chrono::duration_cast<std::chrono::milliseconds>(
                                             Clock::now() - since)),
              1)
        << "node " << r << " did not exit with an error within " << within.count() << " ms:\n"
        << cluster_.err(r);
    const std::string err = cluster_.err(r);
    for (const auto& piece : expected)
      EXPECT_NE(err.find(piece), std::string::npos) << "node " << r << ": no '" << piece
                                                     << "' in\n" << err;
  }

  void kill_and_expect_named(int victim, const std::vector<std::string>& expected) {
    Job job;
    launch(job);
    wait_until_running(job.nodes);
    cluster_.signal(victim, SIGKILL);
    const auto killed = Clock::now();
    EXPECT_EQ(cluster_.wait(victim, 5s), 128 + SIGKILL);
    for (int r = 0; r < job.nodes; ++r)
      if (r != victim) expect_failed(r, killed, 5s, expected);
  }

  Cluster cluster_;
  int launched_ = 0;
  std::set<std::string> shm_before_;
};

TEST_F(Liveness, KillingTheFirstNodeEndsTheOthersNamingIt) {
  kill_and_expect_named(0, {"node 0 (the scheduler at 127.0.0.1:", "died"});
}

TEST_F(Liveness, KillingTheMiddleNodeEndsTheOthersNamingIt) {
  kill_and_expect_named(1, {"node 1 died (stage 1)"});
}

TEST_F(Liveness, KillingTheLastNodeEndsTheOthersNamingIt) {
  kill_and_expect_named(2, {"node 2 died (stage 2)"});
}

// The stopped node keeps its sockets open: only the heartbeats tell. Once continued, it ends
// by itself with the reason node 0 sent it.
TEST_F(Liveness, StoppingTheMiddleNodeEndsTheOthersNamingIt) {
  Job job;
  launch(job);
  wait_until_running(job.nodes);
  cluster_.signal(1, SIGSTOP);
  const auto stopped = Clock::now();
  const auto within = std::chrono::milliseconds(int(job.heartbeat_timeout * 1000)) + 5s;
  for (int r : {0, 2})
    expect_failed(r, stopped, within,
                  {"node 1 (stage 1) stopped answering for", "heartbeat_timeout 3.0 s",
                   "last seen: stage 1"});
  // Not before the timeout: a node is given all of it.
  EXPECT_GE(Clock::now() - stopped, 3s);
  cluster_.signal(1, SIGCONT);
  expect_failed(1, Clock::now(), 5s, {"error"});
}

TEST_F(Liveness, StoppingNodeZeroEndsTheOthersNamingIt) {
  Job job;
  launch(job);
  wait_until_running(job.nodes);
  cluster_.signal(0, SIGSTOP);
  const auto stopped = Clock::now();
  const auto within = std::chrono::milliseconds(int(job.heartbeat_timeout * 1000)) + 5s;
  for (int r : {1, 2})
    expect_failed(r, stopped, within,
                  {"node 0 (the scheduler at 127.0.0.1:", "stopped answering for",
                   str_cat("here: stage ", r)});
  cluster_.signal(0, SIGCONT);
  expect_failed(0, Clock::now(), 5s, {"error"});
}

// Node 1's device is 20x slower (0.2 s an action where the others take 0.01 s): the others
// wait for it for far longer than a heartbeat period, but every one of its actions ends well
// within the 1 s timeout, so the job completes.
TEST_F(Liveness, ANodeTwentyTimesSlowerIsNotHung) {
  Job job;
  job.steps = 3;
  job.heartbeat_timeout = 1.0;
  job.slowdown = "[1, 20, 1]";
  launch(job);
  for (int r = 0; r < job.nodes; ++r)
    ASSERT_EQ(cluster_.wait(r, 60s), 0) << "node " << r << ":\n" << cluster_.err(r);
  EXPECT_EQ(cluster_.err(0).find("stopped answering"), std::string::npos) << cluster_.err(0);
}

// The watchdog's other half: one action (10 layers of 0.01 s, 20x slower: 2 s) longer than
// the 1 s timeout is a stage that made no progress, named with what it was computing.
TEST_F(Liveness, AnActionLongerThanTheTimeoutIsNamed) {
  Job job;
  job.layers_per_stage = 10;
  job.heartbeat_timeout = 1.0;
  job.slowdown = "[1, 20, 1]";
  launch(job);
  const auto start = Clock::now();
  for (int r = 0; r < job.nodes; ++r)
    expect_failed(r, start, 40s,
                  {"stage 1 on node 1 made no progress for", "heartbeat_timeout 1.0 s",
                   ": computing g"});
}

// The control plane and the UCX data plane meet at 127.0.0.2 (a loopback address other than
// the default, as a second host's would be; node 0's rendezvous binds exactly that address):
// a job completes, and a killed peer is detected.
TEST_F(Liveness, TheDataPlaneAcrossLoopbackAddressesWorks) {
  Job job;
  job.addr = "127.0.0.2";
  job.steps = 2;
  launch(job);
  for (int r = 0; r < job.nodes; ++r)
    ASSERT_EQ(cluster_.wait(r, 60s), 0) << "node " << r << ":\n" << cluster_.err(r);
  EXPECT_NE(cluster_.err(0).find("listening on 127.0.0.2:"), std::string::npos) << cluster_.err(0);
}

TEST_F(Liveness, TheDataPlaneAcrossLoopbackAddressesSeesAKilledPeer) {
  Job job;
  job.addr = "127.0.0.2";
  launch(job);
  wait_until_running(job.nodes);
  cluster_.signal(1, SIGKILL);
  const auto killed = Clock::now();
  EXPECT_EQ(cluster_.wait(1, 5s), 128 + SIGKILL);
  for (int r : {0, 2}) expect_failed(r, killed, 5s, {"node 1 died (stage 1)"});
}

}  // namespace
}  // namespace libai::testing
