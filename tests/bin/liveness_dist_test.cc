// Liveness of `libai-actor run` over real processes (Note [Liveness] in actors/cluster/cluster_node.h):
// a pipeline of 3 nodes where the first, the middle or the last node is killed, or the middle
// node is stopped (SIGSTOP, as a stuck driver or a swapping host looks), and the UCX data plane
// across 127.0.0.2. Every other node must end with one error naming the node within the
// documented time (kill: 5 s; stop: the heartbeat timeout + 5 s); a node 20x slower than the
// others is not hung. The slower cases are in liveness_slow_test.cc.
#include "tests/bin/liveness.h"

namespace libai::testing::liveness {
namespace {

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
  stop_and_expect_named(Job{}, 1, [](int) -> std::vector<std::string> {
    return {"node 1 (stage 1) stopped answering for", "heartbeat_timeout 3.0 s",
            "last seen: stage 1"};
  });
}

// The control plane and the UCX data plane (chosen by train.cluster.transport: ucx, as between
// hosts) meet at 127.0.0.2 (a loopback address other than
// the default, as a second host's would be; node 0's rendezvous binds exactly that address):
// a job completes, and a killed peer is detected.
TEST_F(Liveness, TheDataPlaneAcrossLoopbackAddressesWorks) {
  Job job;
  job.addr = "127.0.0.2";
  job.transport = "ucx";
  job.steps = 2;
  launch(job);
  for (int r = 0; r < job.nodes; ++r)
    ASSERT_EQ(cluster_.wait(r, 60s), 0) << "node " << r << ":\n" << cluster_.err(r);
  EXPECT_NE(cluster_.err(0).find("listening on 127.0.0.2:"), std::string::npos) << cluster_.err(0);
  EXPECT_NE(cluster_.err(0).find("data plane between the 3 nodes: UCX"), std::string::npos)
      << cluster_.err(0);
}

TEST_F(Liveness, TheDataPlaneAcrossLoopbackAddressesSeesAKilledPeer) {
  Job job;
  job.addr = "127.0.0.2";
  job.transport = "ucx";
  launch(job);
  wait_until_running(job.nodes);
  cluster_.signal(1, SIGKILL);
  const auto killed = Clock::now();
  EXPECT_EQ(cluster_.wait(1, 5s), 128 + SIGKILL);
  for (int r : {0, 2}) expect_failed(r, killed, 5s, {"node 1 died (stage 1)"});
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

}  // namespace
}  // namespace libai::testing::liveness
