// `libai-actor run` of synthetic training jobs (job._target_: synthetic_train) on several real
// processes on loopback: training stage actors on every node, activations and gradient packets
// crossing processes over UCX, GPipe, 1F1B and interleaved programs for several steps; a node
// killed mid-step ends every node within 5 s naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/bin/cluster.h"

namespace libai::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

struct TrainJob {
  int nodes = 2;
  std::string schedule = "1f1b";
  int chunks = 1, micro_batches = 4, steps = 2;
  double forward = 0.001, backward = 0.002;
};

std::string train_config(const Cluster& cluster, const TrainJob& j) {
  const std::string yaml = str_cat(
      "_base_: [", LIBAI_SOURCE_DIR, "/configs/default.yaml]\n",
      "train:\n  dist: {pipeline_parallel_size: ", j.nodes, "}\n",
      "  cluster: {nodes: ", j.nodes, ", token: test-token, join_timeout: 30.0}\n",
      "job:\n  _target_: synthetic_train\n  forward_seconds: ", j.forward,
      "\n  backward_seconds: ", j.backward, "\n  micro_batches: ", j.micro_batches,
      "\n  schedule: ", j.schedule, "\n  chunks: ", j.chunks, "\n  steps: ", j.steps,
      "\n  elements: 1000\n");
  const std::string path = cluster.dir() + "/train.yaml";
  std::ofstream(path) << yaml;
  return path;
}

void launch(Cluster& cluster, const std::string& config, int nodes, int port) {
  for (int r = 0; r < nodes; ++r) {
    std::vector<std::string> args{"run", config, "--node-rank", std::to_string(r), "--port",
                                  std::to_string(port)};
    if (r == 0) args.push_back("--json");
    cluster.launch(args);
  }
}

// Runs `j` and checks every step's summary and that packets crossed every process boundary.
void expect_trains_across_processes(const TrainJob& j) {
  Cluster cluster;
  launch(cluster, train_config(cluster, j), j.nodes, free_port());
  for (int r = 0; r < j.nodes; ++r)
    ASSERT_EQ(cluster.wait(r, 120s), 0) << "node " << r << ":\n" << cluster.err(r) << cluster.out(r);
  const json out = json::parse(cluster.out(0));
  const auto& steps = out["train"]["steps"];
  ASSERT_EQ(steps.size(), size_t(j.steps));
  const int virtual_stages = j.nodes * j.chunks;
  for (int k = 0; k < j.steps; ++k) {
    // Each micro-batch reached the last virtual stage once, through every virtual stage in
    // order (the synthetic stages check what they receive, forward and backward).
    EXPECT_EQ(steps[size_t(k)]["step"], k);
    EXPECT_EQ(steps[size_t(k)]["loss_count"], j.micro_batches);
    EXPECT_EQ(steps[size_t(k)]["loss_sum"].get<double>(), double(j.micro_batches * (virtual_stages - 1)));
    EXPECT_EQ(steps[size_t(k)]["extra"]["backwards"].get<double>(),
              double(j.nodes * j.chunks * j.micro_batches));
  }
  ASSERT_EQ(out["stages"].size(), size_t(j.nodes));
  for (const auto& stage : out["stages"]) {
    // Every stage received bytes over UCX: stage 0 only gradients (it reads its own data)
    // unless it runs a later chunk; the last stage only activations.
    EXPECT_GT(stage["bytes_received"].get<uint64_t>(), 0u) << stage.dump();
    EXPECT_EQ(stage["actions"].get<uint64_t>(), uint64_t(2 * j.chunks * j.micro_batches * j.steps));
  }
}

TEST(RunTrainCluster, OneFOneBOnThreeProcesses) {
  expect_trains_across_processes({.nodes = 3, .schedule = "1f1b", .micro_batches = 6, .steps = 3});
}

TEST(RunTrainCluster, GPipeOnTwoProcesses) {
  expect_trains_across_processes({.nodes = 2, .schedule = "gpipe", .micro_batches = 4, .steps = 2});
}

TEST(RunTrainCluster, InterleavedOnTwoProcesses) {
  expect_trains_across_processes(
      {.nodes = 2, .schedule = "interleaved", .chunks = 2, .micro_batches = 4, .steps = 2});
}

// Mixed devices (Note [Synthetic training jobs]): node 0 emulates a device twice as slow as
// node 1's; balance measured splits 24 layers by the devices' timed layers as a training plan
// (16 on the fast device against 8: 8 ms each; timing noise may move one layer), and `run
// --json` reports the training plan's predicted step beside the measured one.
TEST(RunTrainCluster, MixedDevicesAreBalancedByATrainingPlan) {
  Cluster cluster;
  const std::string yaml = str_cat(
      "_base_: [", LIBAI_SOURCE_DIR, "/configs/default.yaml]\n",
      "train:\n  dist: {pipeline_parallel_size: 2, pipeline_num_layers: 24, balance: measured}\n",
      "  cluster: {nodes: 2, token: test-token, join_timeout: 30.0, device_slowdown: [2, 1]}\n",
      "job:\n  _target_: synthetic_train\n  layer_seconds: 0.0002\n  backward_factor: 2\n",
      "  micro_batches: 4\n  schedule: 1f1b\n  steps: 2\n");
  const std::string config = cluster.dir() + "/mixed.yaml";
  std::ofstream(config) << yaml;
  launch(cluster, config, 2, free_port());
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(cluster.wait(r, 120s), 0) << "node " << r << ":\n" << cluster.err(r) << cluster.out(r);
  const json out = json::parse(cluster.out(0));
  const json& plan = out["plan"];
  EXPECT_EQ(plan["workload"], "train");
  EXPECT_EQ(plan["schedule"], "1f1b");
  // The stage on node 1 (the fast device) holds 15-17 of the 24 layers.
  const auto stage_of = plan["stage_of"].get<std::vector<int>>();
  const auto device_of_stage = plan["device_of_stage"].get<std::vector<int>>();
  ASSERT_EQ(stage_of.size(), 24u);
  ASSERT_EQ(device_of_stage.size(), 2u);
  const int fast_stage = device_of_stage[0] == 1 ? 0 : 1;
  const auto fast_layers = std::count(stage_of.begin(), stage_of.end(), fast_stage);
  EXPECT_GE(fast_layers, 15) << plan.dump();
  EXPECT_LE(fast_layers, 17) << plan.dump();
  for (int s = 0; s < 2; ++s)
    EXPECT_NEAR(plan["stage_backward_seconds"][size_t(s)].get<double>(),
                2 * plan["stage_seconds"][size_t(s)].get<double>(), 1e-12);
  EXPECT_GT(plan["predicted_step_seconds"].get<double>(), 0);
  EXPECT_NEAR(plan["predicted_seconds"].get<double>(), 2 * plan["predicted_step_seconds"].get<double>(), 1e-9);
  EXPECT_GT(out["train"]["measured_step_seconds"].get<double>(), 0);
  EXPECT_EQ(out["train"]["steps"][0]["loss_count"], 4);
}

TEST(RunTrainCluster, AKilledNodeEndsTheTrainingJobEverywhereNamingIt) {
  Cluster cluster;
  // Minutes of training unless something ends it.
  const std::string config = train_config(
      cluster, {.nodes = 3, .micro_batches = 6, .steps = 100000, .forward = 0.005, .backward = 0.01});
  launch(cluster, config, 3, free_port());
  ASSERT_TRUE(cluster.wait_for_log(0, "node 2 (", 30s)) << cluster.err(0);
  std::this_thread::sleep_for(1500ms);  // steps are running
  ASSERT_EQ(cluster.wait(0, 0s), -1) << "node 0 ended early:\n" << cluster.err(0);
  cluster.signal(2, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  for (int r : {0, 1}) {
    EXPECT_EQ(cluster.wait(r, 5s), 1) << "node " << r << " did not exit with an error within 5 s";
    EXPECT_NE(cluster.err(r).find("node 2 died (stage 2)"), std::string::npos)
        << "node " << r << ":\n" << cluster.err(r);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 5s);
}

}  // namespace
}  // namespace libai::testing
