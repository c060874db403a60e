// The fixture of the liveness tests (liveness_dist_test.cc, liveness_slow_test.cc): a synthetic
// pipeline job of `libai-actor run` on 3 real processes with a short heartbeat timeout, and the
// checks every test ends with: every node ended on its own (a stopped node once continued, too)
// and was reaped, and no shared-memory segment of the project was left behind.
//
//   TEST_F(Liveness, X) {
//     Job job;
//     launch(job);
//     wait_until_running(job.nodes);
//     cluster_.signal(1, SIGKILL);
//     expect_failed(0, Clock::now(), 5s, {"node 1 died"});
//   }
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>

#include "tests/bin/cluster.h"

namespace libai::testing::liveness {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// The shared-memory segments of this project (POSIX shm_open names live in /dev/shm).
inline std::set<std::string> shm_segments() {
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
  std::string transport = "auto";  // train.cluster.transport: shared memory on this host
  bool train = false;  // a synthetic training job (1F1B, forward 5 ms, backward 10 ms)
};

class Liveness : public ::testing::Test {
 protected:
  void SetUp() override { shm_before_ = shm_segments(); }

  // After every test: every node ended by itself and was reaped, no segment was left.
  void TearDown() override {
    for (int r = 0; r < launched_; ++r)
      EXPECT_GE(cluster_.wait(r, 0ms), 0) << "node " << r << " was still running";
    // A leaked segment stays; one of another job running beside this test (ctest -j) is
    // unlinked within milliseconds of its creation: count only what is still there 300 ms on.
    std::set<std::string> added;
    for (const auto& name : shm_segments())
      if (!shm_before_.count(name)) added.insert(name);
    std::set<std::string> leaked;
    if (!added.empty()) {
      std::this_thread::sleep_for(300ms);
      for (const auto& name : shm_segments())
        if (added.count(name)) leaked.insert(name);
    }
    EXPECT_TRUE(leaked.empty()) << "leaked /dev/shm/" << *leaked.begin();
  }

  std::string config(const Job& job) {
    const std::string target =
        job.train ? str_cat("job:\n  _target_: synthetic_train\n  forward_seconds: 0.005\n",
                            "  backward_seconds: 0.01\n  micro_batches: 6\n  schedule: 1f1b\n",
                            "  elements: 1000\n  steps: ", job.steps, "\n")
                  : str_cat("job:\n  _target_: synthetic\n  layer_seconds: ", job.layer_seconds,
                            "\n  num_micro_batches: ", job.nodes, "\n  steps: ", job.steps, "\n");
    const std::string yaml =
        str_cat("_base_: [", LIBAI_SOURCE_DIR, "/configs/default.yaml]\n",
                "train:\n  dist: {pipeline_parallel_size: ", job.nodes,
                ", pipeline_num_layers: ", job.nodes * job.layers_per_stage, "}\n",
                "  cluster: {nodes: ", job.nodes, ", token: test-token, join_timeout: 30.0, ",
                "heartbeat_timeout: ", job.heartbeat_timeout, ", device_slowdown: ", job.slowdown,
                ", transport: ", job.transport, "}\n", target);
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

  // Waits until node 0 logged the data plane it chose (every node joined and the plan is
  // made), then lets the job run a moment. Planning takes a while on a slow build (several
  // seconds under the sanitizers), so the wait is for that line, not for the last join.
  void wait_until_running(int nodes) {
    ASSERT_TRUE(cluster_.wait_for_log(0, str_cat("data plane between the ", nodes, " nodes"), 30s))
        << cluster_.err(0);
    std::this_thread::sleep_for(1000ms);
    for (int r = 0; r < nodes; ++r)
      ASSERT_EQ(cluster_.wait(r, 0ms), -1) << "node " << r << " ended early:\n" << cluster_.err(r);
  }

  // Node r ended with an error within `within` of `since`, and its log says every piece of
  // `expected`.
  void expect_failed(int r, Clock::time_point since, std::chrono::milliseconds within,
                     const std::vector<std::string>& expected) {
    // wait() scales its timeout (kTimeScale): the deadline is since + within x kTimeScale.
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since);
    EXPECT_EQ(cluster_.wait(r, within - elapsed / kTimeScale), 1)
        << "node " << r << " did not exit with an error within " << within.count() << " ms:\n"
        << cluster_.err(r);
    const std::string err = cluster_.err(r);
    for (const auto& piece : expected)
      EXPECT_NE(err.find(piece), std::string::npos) << "node " << r << ": no '" << piece << "' in\n"
                                                    << err;
  }

  void kill_and_expect_named(int victim, const std::vector<std::string>& expected) {
    Job job;
    launch(job);
    wait_until_running(job.nodes);
    // The nodes share this host: the data plane is shared memory, whose peers' deaths come
    // from the control plane and the pids (Note [Choosing the transport]).
    EXPECT_NE(cluster_.err(0).find("data plane between the 3 nodes: shared memory"),
              std::string::npos)
        << cluster_.err(0);
    cluster_.signal(victim, SIGKILL);
    const auto killed = Clock::now();
    EXPECT_EQ(cluster_.wait(victim, 5s), 128 + SIGKILL);
    for (int r = 0; r < job.nodes; ++r)
      if (r != victim) expect_failed(r, killed, 5s, expected);
  }

  // Stops `victim` (SIGSTOP) in a running `job`: every other node must end naming it, after the
  // heartbeat timeout and within 5 s more, each with `expected(r)` in its log; continued, the
  // victim ends by itself with an error.
  void stop_and_expect_named(const Job& job, int victim,
                             const std::function<std::vector<std::string>(int)>& expected) {
    launch(job);
    wait_until_running(job.nodes);
    cluster_.signal(victim, SIGSTOP);
    const auto stopped = Clock::now();
    const auto timeout = std::chrono::milliseconds(int(job.heartbeat_timeout * 1000));
    for (int r = 0; r < job.nodes; ++r)
      if (r != victim) expect_failed(r, stopped, timeout + 5s, expected(r));
    // Not before the timeout: a node is given all of it.
    EXPECT_GE(Clock::now() - stopped, timeout);
    cluster_.signal(victim, SIGCONT);
    expect_failed(victim, Clock::now(), 5s, {"error"});
  }

  Cluster cluster_;
  int launched_ = 0;
  std::set<std::string> shm_before_;
};

}  // namespace libai::testing::liveness
