// `libai-actor train` with graph.enabled: true: a small random GPT-2 (4 layers, hidden 32)
// trained through the training stage actors, in one process and on several real processes on
// loopback (activations, gradients and the groups' collectives over UCX), with dropout and
// activation checkpointing on: the loss of every step equals eager training of the same
// config on one device (graph.enabled false, the replicas' micro-batches accumulated there).
// A node killed mid-step ends every other node within 5 s naming it. On devices of unequal
// (emulated) speeds, train.dist.balance measured splits the layers by the plan
// (plan/train_plan.h), the losses still one device's. Checkpoints: a graph-mode run over
// two processes resumed from its step-3 checkpoint continues with the uninterrupted run's
// losses (bitwise at the same layout, within 1e-5 at another layout and eagerly), an eager
// checkpoint resumes in graph mode; evaluation equals the eager pipeline's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>

#include "models/model.h"
#include "runtime/config/config.h"
#include "tests/bin/cluster.h"

namespace libai::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// metrics.json's `key` by iteration (a later record of an iteration wins).
std::map<int64_t, double> losses_of(const fs::path& metrics, const std::string& key = "loss") {
  std::map<int64_t, double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const json record = json::parse(line);
    if (record.contains(key) && !record[key].is_null())
      out[record["iteration"].get<int64_t>()] = record[key].get<double>();
  }
  return out;
}

struct Layout {
  int nodes = 1, dp = 1, pp = 1, chunks = 1, accumulation = 2;
  std::string schedule = "1f1b";
  bool graph = true;
  int64_t steps = 20;
  int layers = 4;                      // of the random GPT-2
  std::string balance = "uniform";     // train.dist.balance (graph mode)
  std::string slowdown;                // train.cluster.device_slowdown (graph mode), e.g. "[2, 1]"
  std::string profiles;                // train.cluster.profiles (graph mode)
  int64_t checkpoint_period = 100000;
  bool evaluate = false;  // validation split 1/10, every 2 steps over 2 micro-batches
  int zero = 0;           // train.zero_optimization.stage (0: off)
  // graph.auto_parallel.enabled: the layout keys null (searched) but the micro-batch size, the
  // global batch 2 x accumulation x dp.
  bool auto_parallel = false;
};

class TrainGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(missing_binary(), "");
    // The fixture tokenizer's corpus as an indexed dataset, and a random 4-layer GPT-2.
    const std::string text = cluster_.dir() + "/corpus.txt";
    {
      std::ofstream f(text);
      std::mt19937 rng(5);
      const char* words[] = {"the", "quick", "brown", "fox",  "jumps", "over", "lazy",  "dog",
                             "and", "runs",  "far",   "away", "from",  "home", "today", "again"};
      for (int line = 0; line < 300; ++line) {
        for (int w = 0; w < 12; ++w) f << (w ? " " : "") << words[rng() % 16];
        f << "\n";
      }
    }
    const int node = cluster_.launch({"preprocess", "--input", text, "--tokenizer",
                                      kModels + "gpt2", "--output-prefix",
                                      cluster_.dir() + "/corpus", "--append-eod"});
    ASSERT_EQ(cluster_.wait(node, 60s), 0) << cluster_.err(node);
    for (int layers : {4, 8})
      std::ofstream(model_config(layers))
          << R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": )"
          << layers << R"(,
               "n_embd": 32, "n_head": 4, "n_inner": 64, "n_positions": 64, "vocab_size": 503,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
               "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,
               "initializer_range": 0.02, "bos_token_id": 2, "eos_token_id": 2,
               "tie_word_embeddings": true})";
  }

  std::string model_config(int layers) {
    return cluster_.dir() + "/config" + std::to_string(layers) + ".json";
  }

  std::string write_config(const std::string& name, const Layout& l) {
    const std::string configs = LIBAI_SOURCE_DIR "/configs/common/";
    const fs::path out = fs::path(cluster_.dir()) / name;
    const std::string path = cluster_.dir() + "/" + name + ".yaml";
    std::ofstream f(path);
    f << "_base_: [" << configs << "train.yaml, " << configs << "optim.yaml, " << configs
      << "graph.yaml]\n"
      << "graph: {enabled: " << (l.graph ? "true" : "false")
      << (l.auto_parallel ? ", auto_parallel: {enabled: true}" : "") << "}\n"
      << "model: {config: " << model_config(l.layers) << "}\n"
      << "data: {_target_: gpt, prefix: " << cluster_.dir()
      << "/corpus_text_document, seq_length: 16, splits: " << (l.evaluate ? "[9, 1]" : "[1]")
      << "}\n"
      << "optim: {lr: 1.0e-3, clip_grad_norm: 1.0}\n"
      << "train:\n  output_dir: " << out.string() << "\n  train_micro_batch_size: 2\n"
      << "  train_iter: " << l.steps << "\n  warmup_ratio: 0.2\n  log_period: 1\n  seed: 7\n"
      << "  checkpointer: {period: " << l.checkpoint_period << "}\n"
      << "  evaluation: {enabled: " << (l.evaluate ? "true" : "false")
      << ", eval_period: 2, eval_iter: 2}\n";
    if (l.auto_parallel)
      f << "  global_batch_size: " << 2 * l.accumulation * l.dp << "\n"
        << "  num_accumulation_steps: null\n"
        << "  activation_checkpoint: {enabled: null}\n"
        << "  zero_optimization: {enabled: null}\n"
        << "  dist: {data_parallel_size: null, tensor_parallel_size: null, "
           "pipeline_parallel_size: null, pipeline_schedule: null, virtual_pipeline_size: null, "
           "balance: null}\n";
    else
      f << "  num_accumulation_steps: " << l.accumulation << "\n"
        << "  activation_checkpoint: {enabled: true}\n"
        << "  zero_optimization: {enabled: " << (l.zero ? "true" : "false")
        << ", stage: " << std::max(l.zero, 1) << "}\n"
        << "  dist: {data_parallel_size: " << l.dp << ", pipeline_parallel_size: " << l.pp
        << ", pipeline_schedule: " << l.schedule << ", virtual_pipeline_size: " << l.chunks
        << (l.graph ? ", balance: " + l.balance : std::string()) << "}\n";
    f << "  cluster: {nodes: " << l.nodes << ", token: test-token, join_timeout: 30.0"
      << (l.graph && !l.slowdown.empty() ? ", device_slowdown: " + l.slowdown : std::string())
      << (l.graph && !l.profiles.empty() ? ", profiles: " + l.profiles : std::string())
      << "}\n";
    return path;
  }

  // Runs `l` on its nodes with `flags`; returns the losses node 0 logged (and its log in *log).
  std::map<int64_t, double> train(const std::string& name, const Layout& l,
                                  const std::vector<std::string>& flags = {},
                                  std::string* log = nullptr) {
    const std::string config = write_config(name, l);
    const int port = free_port();
    std::vector<int> nodes;
    for (int r = 0; r < l.nodes; ++r) {
      std::vector<std::string> args{"train",           config,   "--node-rank",
                                    std::to_string(r), "--port", std::to_string(port)};
      args.insert(args.end(), flags.begin(), flags.end());
      nodes.push_back(cluster_.launch(args));
    }
    for (int n : nodes) {
      const int code = cluster_.wait(n, 120s);
      EXPECT_EQ(code, 0) << name << " node " << n << ":\n" << cluster_.err(n) << cluster_.out(n);
    }
    if (log) *log = cluster_.err(nodes[0]) + cluster_.out(nodes[0]);
    return losses_of(fs::path(cluster_.dir()) / name / "metrics.json");
  }

  // The same run on one device, eagerly: the replicas' micro-batches accumulated there.
  void expect_equals_one_device(const std::string& name, const Layout& l, std::string* log = nullptr) {
    Layout reference{
        .accumulation = l.accumulation * l.dp, .graph = false, .steps = l.steps, .layers = l.layers};
    const auto expected = train(name + "_reference", reference);
    const auto got = train(name, l, {}, log);
    ASSERT_EQ(expected.size(), size_t(l.steps));
    ASSERT_EQ(got.size(), size_t(l.steps));
    for (const auto& [iteration, loss] : expected)
      EXPECT_NEAR(got.at(iteration), loss, 1e-5 * std::abs(loss)) << name << " step " << iteration;
  }

  // A fresh output folder `name` holding `from`'s checkpoint `checkpoint`, named by
  // last_checkpoint (what a stopped run leaves, copied where the resumed run writes).
  void stage_checkpoint(const std::string& from, const std::string& checkpoint,
                        const std::string& name) {
    const fs::path dir = fs::path(cluster_.dir()) / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy(fs::path(cluster_.dir()) / from / checkpoint, dir / checkpoint,
             fs::copy_options::recursive);
    std::ofstream(dir / "last_checkpoint") << checkpoint << "\n";
  }

  Cluster cluster_;
};

TEST_F(TrainGraph, PipelineInOneProcessEqualsOneDevice) {
  expect_equals_one_device("pp2_local", {.nodes = 1, .pp = 2});
}

TEST_F(TrainGraph, OneFOneBOnTwoProcessesEqualsOneDevice) {
  expect_equals_one_device("pp2", {.nodes = 2, .pp = 2, .accumulation = 4});
}

TEST_F(TrainGraph, DataTimesPipelineOnTwoProcessesEqualsOneDevice) {
  expect_equals_one_device("dp2_pp2", {.nodes = 2, .dp = 2, .pp = 2});
}

// ZeRO through the stage actors (train/zero.h): the data-parallel groups span the two
// processes, so the reduce-scatters and all-gathers of the shards cross them.
TEST_F(TrainGraph, ZeroThreeDataTimesPipelineOnTwoProcessesEqualsOneDevice) {
  expect_equals_one_device("zero3_dp2_pp2", {.nodes = 2, .dp = 2, .pp = 2, .zero = 3});
}

TEST_F(TrainGraph, ZeroOneAndTwoDataParallelOnTwoProcessesEqualOneDevice) {
  expect_equals_one_device("zero1_dp2", {.nodes = 2, .dp = 2, .zero = 1});
  expect_equals_one_device("zero2_dp2", {.nodes = 2, .dp = 2, .zero = 2});
}

// Shard ownership follows node 0's plan: a node whose config disagrees on ZeRO is refused
// with the key named, and the job ends on both nodes.
TEST_F(TrainGraph, ANodeThatDisagreesOnZeroIsRefusedNamingTheKey) {
  const std::string planned = write_config("zero_node0", {.nodes = 2, .dp = 2, .steps = 2, .zero = 1});
  const std::string other = write_config("zero_node1", {.nodes = 2, .dp = 2, .steps = 2, .zero = 2});
  const int port = free_port();
  const int node0 =
      cluster_.launch({"train", planned, "--node-rank", "0", "--port", std::to_string(port)});
  const int node1 =
      cluster_.launch({"train", other, "--node-rank", "1", "--port", std::to_string(port)});
  EXPECT_EQ(cluster_.wait(node1, 60s), 1) << cluster_.err(node1);
  EXPECT_NE(cluster_.err(node1).find("train.zero_optimization.stage = 2, but node 0 planned the "
                                     "job with 1"),
            std::string::npos)
      << cluster_.err(node1);
  EXPECT_EQ(cluster_.wait(node0, 60s), 1) << cluster_.err(node0);
}

TEST_F(TrainGraph, InterleavedOnTwoProcessesEqualsOneDevice) {
  expect_equals_one_device(
      "interleaved", {.nodes = 2, .pp = 2, .chunks = 2, .accumulation = 4, .schedule = "interleaved"});
}

// Node 0's device is emulated 2x slower than node 1's: the measured plan gives node 1's stage
// more of the 8 layers (node 0 logs the plan), and the losses are still one device's.
// Real timings: a slow-down of 4 (not 2) so that a busy host (ctest runs tests side by side)
// cannot make the fast node's own timing look as slow as the emulated one's.
TEST_F(TrainGraph, MeasuredBalanceOnUnequalDevicesGivesTheFastOneMoreLayers) {
  std::string log;
  expect_equals_one_device("balanced",
                           {.nodes = 2, .pp = 2, .accumulation = 4, .steps = 8, .layers = 8,
                            .balance = "measured", .slowdown = "[4, 1]"},
                           &log);
  std::map<std::string, int> layers_on;  // device name -> layers
  const std::regex stage(R"(stage \d: layers \d+-\d+ \((\d+)\), (node\d:cpu:\d))");
  for (std::sregex_iterator it(log.begin(), log.end(), stage), end; it != end; ++it)
    layers_on[(*it)[2]] += std::stoi((*it)[1]);
  ASSERT_EQ(layers_on.size(), 2u) << log;
  EXPECT_EQ(layers_on["node0:cpu:0"] + layers_on["node1:cpu:0"], 8) << log;
  EXPECT_GT(layers_on["node1:cpu:0"], layers_on["node0:cpu:0"]) << log;
  EXPECT_NE(log.find("balance measured"), std::string::npos) << log;
}

// The fast device first: the plan puts the head's stage on it, so stage 0 (and slot 0, which
// hosts the groups' rendezvous) runs on node 1. The profiles fix the timings the plan sees (as
// measured at these speeds, without the noise of a busy host), so the plan is always this one.
TEST_F(TrainGraph, MeasuredBalanceMayPutStageZeroOnAnotherNode) {
  std::string log;
  expect_equals_one_device(
      "balanced_swapped",
      {.nodes = 2, .pp = 2, .accumulation = 4, .steps = 4, .layers = 8, .balance = "measured",
       .slowdown = "[1, 2]",
       .profiles = "{node0:cpu:0: {matmul_gflops: 100, memory_bandwidth_gbs: 10, layer_seconds: "
                   "0.001, layer_step_seconds: 0.002}, node1:cpu:0: {matmul_gflops: 50, "
                   "memory_bandwidth_gbs: 5, layer_seconds: 0.002, layer_step_seconds: 0.004}}"},
      &log);
  EXPECT_TRUE(std::regex_search(log, std::regex(R"(stage 0: layers [^,]+, node1:cpu:0)"))) << log;
  std::map<std::string, int> layers_on;
  const std::regex stage(R"(stage \d: layers \d+-\d+ \((\d+)\), (node\d:cpu:\d))");
  for (std::sregex_iterator it(log.begin(), log.end(), stage), end; it != end; ++it)
    layers_on[(*it)[2]] += std::stoi((*it)[1]);
  EXPECT_GT(layers_on["node0:cpu:0"], layers_on["node1:cpu:0"]) << log;
}

// graph.auto_parallel.enabled on two processes (Note [Auto parallel on a cluster]): node 0
// searches over both nodes' measured devices, the second 3x slower, and its assignment carries
// the choice to node 1; the chosen layout trains the same model as one device, and the output
// folder's config.yaml holds the choice with auto parallel off.
TEST_F(TrainGraph, AutoParallelOnTwoProcessesRunsNodeZerosChoiceAndEqualsOneDevice) {
  const Layout l{.nodes = 2, .accumulation = 4, .steps = 6, .slowdown = "[1, 3]", .auto_parallel = true};
  std::string log;
  expect_equals_one_device("auto", l, &log);
  const std::smatch chosen = [&] {
    std::smatch m;
    std::regex_search(log, m, std::regex("auto parallel: dp (\\d) x tp (\\d) x pp (\\d), [^\\n]*"));
    return m;
  }();
  ASSERT_FALSE(chosen.empty()) << log;
  // The link between the nodes as the cluster measured it (Note [The control plane's
  // bandwidth]): the search priced it.
  std::smatch link;
  ASSERT_TRUE(std::regex_search(log, link, std::regex("between nodes ([0-9.e+-]+) GB/s \\+ [^\\n]*"
                                                      "measured as the cluster formed")))
      << log;
  EXPECT_GT(std::stod(link[1]), 0.0);
  const config::Config resolved = config::Config::load((fs::path(cluster_.dir()) / "auto" / "config.yaml").string());
  EXPECT_FALSE(resolved.get<bool>("graph.auto_parallel.enabled"));
  EXPECT_EQ(resolved.get<int>("train.dist.data_parallel_size"), std::stoi(chosen[1]));
  EXPECT_EQ(resolved.get<int>("train.dist.pipeline_parallel_size"), std::stoi(chosen[3]));
  EXPECT_EQ(std::stoi(chosen[1]) * std::stoi(chosen[2]) * std::stoi(chosen[3]), 2);
  EXPECT_EQ(resolved.get<int>("train.num_accumulation_steps") * resolved.get<int>("train.dist.data_parallel_size"), 4);
}

TEST_F(TrainGraph, AKilledNodeEndsTheTrainingEverywhereNamingIt) {
  const std::string config = write_config("killed", {.nodes = 2, .pp = 2, .steps = 100000});
  const int port = free_port();
  for (int r = 0; r < 2; ++r)
    cluster_.launch({"train", config, "--node-rank", std::to_string(r), "--port", std::to_string(port)});
  // node 0 is cluster_ index 1 (index 0 ran preprocess).
  ASSERT_TRUE(cluster_.wait_for_log(1, "iter 3/", 60s)) << cluster_.err(1);
  ASSERT_EQ(cluster_.wait(1, 0s), -1) << "node 0 ended early:\n" << cluster_.err(1);
  cluster_.signal(2, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  EXPECT_EQ(cluster_.wait(1, 5s), 1) << "node 0 did not exit with an error within 5 s";
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 5s);
  EXPECT_NE(cluster_.err(1).find("node 1 died"), std::string::npos) << cluster_.err(1);
}

}  // namespace
}  // namespace libai::testing

namespace libai::testing {
namespace {

// PP2 over two processes, 6 steps with a checkpoint after 3 (what a run stopped or killed
// after it leaves); resumed with --resume from that checkpoint.
TEST_F(TrainGraph, CheckpointResumesInGraphModeAndEagerlyAtAnyLayout) {
  const Layout pp2{.nodes = 2, .pp = 2, .steps = 6, .checkpoint_period = 3};
  const auto whole = train("ckpt_whole", pp2);
  ASSERT_EQ(whole.size(), 6u);
  // Graph mode writes the sharded format (Note [Graph-mode checkpoints]); model_final is a
  // model folder too.
  ASSERT_TRUE(fs::exists(fs::path(cluster_.dir()) / "ckpt_whole/model_0000003/layout.json"));
  ASSERT_TRUE(fs::exists(fs::path(cluster_.dir()) / "ckpt_whole/model_final/model.safetensors"));

  // The same layout: bitwise.
  stage_checkpoint("ckpt_whole", "model_0000003", "ckpt_same");
  const auto same = train("ckpt_same", pp2, {"--resume"});
  ASSERT_EQ(same.size(), 3u);
  for (int64_t i : {4, 5, 6}) EXPECT_EQ(same.at(i), whole.at(i)) << "step " << i;

  // Another graph layout (dp 2, one stage per process) and eagerly on one device.
  const std::pair<const char*, Layout> others[] = {
      {"ckpt_dp2", {.nodes = 2, .dp = 2, .accumulation = 1, .steps = 6, .checkpoint_period = 3}},
      {"ckpt_eager", {.accumulation = 2, .graph = false, .steps = 6, .checkpoint_period = 3}}};
  for (const auto& [name, layout] : others) {
    stage_checkpoint("ckpt_whole", "model_0000003", name);
    const auto losses = train(name, layout, {"--resume"});
    ASSERT_EQ(losses.size(), 3u) << name;
    for (int64_t i : {4, 5, 6})
      EXPECT_NEAR(losses.at(i), whole.at(i), 1e-5 * std::abs(whole.at(i))) << name << " step " << i;
  }

  // The other way: the eager run's checkpoint resumes in graph mode over two processes.
  const auto eager = train("eager_whole", others[1].second);
  ASSERT_EQ(eager.size(), 6u);
  stage_checkpoint("eager_whole", "model_0000003", "eager_to_graph");
  const auto resumed = train("eager_to_graph", pp2, {"--resume"});
  ASSERT_EQ(resumed.size(), 3u);
  for (int64_t i : {4, 5, 6})
    EXPECT_NEAR(resumed.at(i), eager.at(i), 1e-5 * std::abs(eager.at(i))) << "step " << i;
}

// Evaluation through the stages (DP2 x PP2 over two processes) equals the eager pipeline's
// (the same layout on threads of one process): every 2 steps and at the end.
TEST_F(TrainGraph, EvaluationEqualsTheEagerPipeline) {
  Layout graph{.nodes = 2, .dp = 2, .pp = 2, .accumulation = 1, .steps = 4, .evaluate = true};
  Layout eager = graph;
  eager.nodes = 1;
  eager.graph = false;
  train("eval_graph", graph);
  train("eval_eager", eager);
  const auto got = losses_of(fs::path(cluster_.dir()) / "eval_graph/metrics.json", "eval/loss");
  const auto expected =
      losses_of(fs::path(cluster_.dir()) / "eval_eager/metrics.json", "eval/loss");
  ASSERT_EQ(expected.size(), 2u);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& [iteration, loss] : expected)
    EXPECT_NEAR(got.at(iteration), loss, 1e-5 * std::abs(loss)) << "step " << iteration;
  EXPECT_TRUE(fs::exists(fs::path(cluster_.dir()) / "eval_graph/model_best/model.safetensors"));
}

// A real interruption: DP2 x PP2 with ZeRO-2 over two processes (sharded checkpoints, the
// replicas' shards on both nodes), node 1 killed with SIGKILL mid-run once the step-5
// checkpoint is written; node 0 ends within 5 s naming it, and both nodes started again with
// --resume continue from the newest complete checkpoint with the uninterrupted run's losses,
// bitwise.
TEST_F(TrainGraph, KilledAfterACheckpointResumesBitwise) {
  const Layout l{.nodes = 2, .dp = 2, .pp = 2, .accumulation = 1, .steps = 150,
                 .checkpoint_period = 5, .zero = 2};
  const auto whole = train("kill_whole", l);
  ASSERT_EQ(whole.size(), 150u);

  const std::string config = write_config("killed", l);
  const int port = free_port();
  const int node0 =
      cluster_.launch({"train", config, "--node-rank", "0", "--port", std::to_string(port)});
  const int node1 =
      cluster_.launch({"train", config, "--node-rank", "1", "--port", std::to_string(port)});
  ASSERT_TRUE(cluster_.wait_for_log(node0, "killed/model_0000005", 60s)) << cluster_.err(node0);
  cluster_.signal(node1, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_EQ(cluster_.wait(node0, 10s), 1) << "node 0 finished before the kill:\n"
                                          << cluster_.err(node0);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 5s) << "node 0 outlived the kill by 5 s";
  EXPECT_NE(cluster_.err(node0).find("node 1 died"), std::string::npos) << cluster_.err(node0);

  const auto resumed = train("killed", l, {"--resume"});
  ASSERT_EQ(resumed.size(), 150u);
  for (const auto& [iteration, loss] : whole)
    EXPECT_EQ(resumed.at(iteration), loss) << "step " << iteration;
  // The resumed run started from a checkpoint, not from step 0.
  const int last = node1 + 1;  // the resumed run's node 0 (train() launches it first)
  EXPECT_NE(cluster_.err(last).find("resuming from"), std::string::npos) << cluster_.err(last);
}

// DP2 x PP2 with ZeRO-1 over two processes saves sharded checkpoints (every slot its own
// shard); the step-3 one resumes at the same layout bitwise, and on one device eagerly and at
// DP2 with ZeRO-3 in graph mode within 1e-5 of the uninterrupted run; `checkpoint merge` of the run's output
// folder (its last checkpoint, model_final) is a Hugging Face folder whose logits are those of
// model_final's whole weights and of the resumed run's model_final.
TEST_F(TrainGraph, ShardedCheckpointReshardsAndMerges) {
  // Saved at DP2 x PP2 with ZeRO-1 (each rank writes its shard of the optimizer state).
  const Layout dp2_pp2{.nodes = 2, .dp = 2, .pp = 2, .accumulation = 1, .steps = 6,
                       .checkpoint_period = 3, .zero = 1};
  const auto whole = train("shard_whole", dp2_pp2);
  ASSERT_EQ(whole.size(), 6u);
  const fs::path saved = fs::path(cluster_.dir()) / "shard_whole/model_0000003";
  ASSERT_TRUE(fs::exists(saved / "layout.json"));
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(saved / "shards")) shards += entry.is_regular_file();
  // ZeRO-1: every slot writes its shard of the optimizer state (the parameters, replicated
  // over the replicas, are written once: identical pieces kept once).
  EXPECT_EQ(shards, 4);

  stage_checkpoint("shard_whole", "model_0000003", "shard_same");
  const auto same = train("shard_same", dp2_pp2, {"--resume"});
  ASSERT_EQ(same.size(), 3u);
  for (int64_t i : {4, 5, 6}) EXPECT_EQ(same.at(i), whole.at(i)) << "step " << i;

  const std::pair<const char*, Layout> others[] = {
      {"shard_eager", {.accumulation = 2, .graph = false, .steps = 6, .checkpoint_period = 3}},
      {"shard_dp2_zero3",
       {.nodes = 2, .dp = 2, .accumulation = 1, .steps = 6, .checkpoint_period = 3, .zero = 3}}};
  for (const auto& [name, layout] : others) {
    stage_checkpoint("shard_whole", "model_0000003", name);
    const auto losses = train(name, layout, {"--resume"});
    ASSERT_EQ(losses.size(), 3u) << name;
    for (int64_t i : {4, 5, 6})
      EXPECT_NEAR(losses.at(i), whole.at(i), 1e-5 * std::abs(whole.at(i))) << name << " step " << i;
  }

  const fs::path hf = fs::path(cluster_.dir()) / "shard_hf";
  const int merge = cluster_.launch(
      {"checkpoint", "merge", (fs::path(cluster_.dir()) / "shard_whole").string(), hf.string()});
  ASSERT_EQ(cluster_.wait(merge, 60s), 0) << cluster_.err(merge);
  auto merged = models::load_model(hf);
  auto final_model = models::load_model(fs::path(cluster_.dir()) / "shard_whole/model_final");
  const Tensor ids = Tensor::from_vector<int64_t>({5, 17, 3, 99, 250, 7, 2, 41}, {1, 8});
  const auto a = merged->forward({{"input_ids", ids}}).at("logits").to_vector<float>();
  const auto b = final_model->forward({{"input_ids", ids}}).at("logits").to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6) << "logit " << i;
  auto resumed = models::load_model(fs::path(cluster_.dir()) / "shard_same/model_final");
  EXPECT_EQ(resumed->forward({{"input_ids", ids}}).at("logits").to_vector<float>(), b);
}

}  // namespace
}  // namespace libai::testing
