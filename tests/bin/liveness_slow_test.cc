// Liveness of `libai-actor run` over real processes, the longer cases (label slow): node 0
// stopped, the middle node of a training job stopped, and one action longer than the heartbeat
// timeout (hung, named). A node 20x slower (not hung) is in liveness_dist_test.cc, which CI runs. Fixture and checks:
// tests/bin/liveness.h.
#include "tests/bin/liveness.h"

namespace libai::testing::liveness {
namespace {

TEST_F(Liveness, StoppingNodeZeroEndsTheOthersNamingIt) {
  stop_and_expect_named(Job{}, 0, [](int r) -> std::vector<std::string> {
    return {"node 0 (the scheduler at 127.0.0.1:", "stopped answering for",
            str_cat("here: stage ", r)};
  });
}

// The same through training stage actors: node 0's train driver waits on a step that cannot
// end, and node 2 on its gradients.
TEST_F(Liveness, StoppingTheMiddleNodeOfATrainingJobEndsTheOthersNamingIt) {
  Job job;
  job.train = true;
  stop_and_expect_named(job, 1, [](int) -> std::vector<std::string> {
    return {"node 1 (stage 1) stopped answering for", "last seen: stage 1"};
  });
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
    expect_failed(
        r, start, 40s,
        {"stage 1 on node 1 made no progress for", "heartbeat_timeout 1.0 s", ": computing g"});
}

}  // namespace
}  // namespace libai::testing::liveness
