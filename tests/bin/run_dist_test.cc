// `libai-actor run` on several real processes on loopback, one per node: pipeline generation
// (GPT-2 and T5) and encoding equal eager mode on one device; dead, missing, refused and
// interrupted nodes end the job on every node with an error naming them, within seconds, and no
// process is left.
#include <gtest/gtest.h>

#include <regex>

#include "actors/jobs/config_job.h"
#include "actors/jobs/model_jobs.h"
#include "models/model.h"
#include "models/pipelines/pipelines.h"
#include "app/schema.h"
#include "tests/bin/cluster.h"
#include "tests/models/random_models.h"

namespace libai::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::vector<std::vector<int64_t>> kPrompts = {{5, 6, 7}, {9}, {11, 3, 30, 2}, {8, 8}, {20, 21}};

fs::path random_gpt2(int layers) {
  for (auto f : families())
    if (f.name == "gpt2") {
      f.config["n_layer"] = layers;
      return save_random_model(f, "run" + std::to_string(layers) + "_" + std::to_string(::getpid()));
    }
  return {};
}

std::string ids_yaml(const std::vector<std::vector<int64_t>>& prompts) {
  std::string out = "[";
  for (size_t i = 0; i < prompts.size(); ++i) out += (i ? ", [" : "[") + id_list(prompts[i]) + "]";
  return out + "]";
}

struct Layout {
  int nodes = 2, pp = 2, tp = 1, dp = 1, devices_per_node = 1, groups = 2;
};

// model_keys: more keys of the model section ("quantize: q4").
std::string generate_config(const Cluster& cluster, const fs::path& model, const Layout& l,
                            const std::string& extra = "", const std::string& model_keys = "") {
  const std::string yaml = str_cat(
      "_base_: [", LIBAI_SOURCE_DIR, "/configs/default.yaml]\n",
      "model: {weights: ", model.string(), model_keys.empty() ? "" : ", " + model_keys, "}\n",
      "train:\n  dist: {data_parallel_size: ", l.dp, ", tensor_parallel_size: ", l.tp,
      ", pipeline_parallel_size: ", l.pp, "}\n",
      "  cluster: {nodes: ", l.nodes, ", token: test-token, devices_per_node: ", l.devices_per_node,
      ", join_timeout: 30.0}\n",
      "job:\n  _target_: generate\n  prompt_ids: ", ids_yaml(kPrompts),
      "\n  max_new_tokens: 6\n  num_groups: ", l.groups, "\n", extra);
  const std::string path = cluster.dir() + "/job.yaml";
  std::ofstream(path) << yaml;
  return path;
}

// Starts every node of `config`; node 0 prints JSON.
void launch_nodes(Cluster& cluster, const std::string& config, int nodes, int port,
                  const std::vector<std::string>& extra = {}) {
  for (int r = 0; r < nodes; ++r) {
    std::vector<std::string> args{"run", config, "--node-rank", std::to_string(r), "--port",
                                  std::to_string(port)};
    if (r == 0) args.push_back("--json");
    args.insert(args.end(), extra.begin(), extra.end());
    cluster.launch(args);
  }
}

void expect_all_succeed(Cluster& cluster, int nodes) {
  for (int r = 0; r < nodes; ++r)
    ASSERT_EQ(cluster.wait(r, 120s), 0) << "node " << r << ":\n" << cluster.err(r) << cluster.out(r);
}

// The token ids eager mode on one device generates for the same groups of prompts.
std::vector<std::vector<int64_t>> eager_tokens(const fs::path& folder, int groups,
                                               const models::LoadOptions& options = {}) {
  auto model = models::load_model(folder, options);
  models::generation::GenerationConfig config;
  config.max_new_tokens = 6;
  models::pipelines::complete_generation_config(folder, model->config().json(), config);
  std::vector<std::vector<int64_t>> out;
  for (const auto& group : actors::split_into_groups(kPrompts, groups)) {
    auto results = models::generation::generate(*model->generative(), group, config);
    for (size_t p = 0; p < group.size(); ++p) {
      std::vector<int64_t> ids = group[p];
      ids.insert(ids.end(), results[p][0].tokens.begin(), results[p][0].tokens.end());
      out.push_back(ids);
    }
  }
  return out;
}

// Runs a generate job of `model` over the layout's nodes; node 0's tokens must be eager mode's
// on one device (loaded with `eager`). Node 0's JSON document.
json expect_generation(const fs::path& model, const Layout& layout, const std::string& model_keys = "",
                       const models::LoadOptions& eager = {}) {
  Cluster cluster;
  const std::string config = generate_config(cluster, model, layout, "", model_keys);
  launch_nodes(cluster, config, layout.nodes, free_port());
  expect_all_succeed(cluster, layout.nodes);
  const json out = json::parse(cluster.out(0));
  const auto expected = eager_tokens(model, layout.groups, eager);
  EXPECT_EQ(out["sequences"].size(), expected.size());
  for (size_t i = 0; i < std::min(expected.size(), out["sequences"].size()); ++i)
    EXPECT_EQ(out["sequences"][i]["token_ids"].get<std::vector<int64_t>>(), expected[i]) << "prompt " << i;
  return out;
}

void expect_generation(const Layout& layout, int layers) {
  const fs::path model = random_gpt2(layers);
  expect_generation(model, layout);
  fs::remove_all(model);
}

TEST(RunCluster, Gpt2GenerationTwoStagesOnTwoNodes) {
  expect_generation({.nodes = 2, .pp = 2, .groups = 2}, 4);
}

// A GGUF file stands where a model folder does: each node reads its stage's tensors from it
// (every block type of the reader is in this file).
TEST(RunCluster, GgufLlamaGenerationTwoStagesOnTwoNodes) {
  expect_generation(fs::path(LIBAI_SOURCE_DIR) / "tests/data/gguf/llama_mixed.gguf",
                    {.nodes = 2, .pp = 2, .groups = 2});
}

// model.quantize: every stage loads its layers quantized (here the Q4_0 file's own weights);
// the tokens are the whole quantized model's in one process, and the plan says q4.
TEST(RunCluster, QuantizedGgufGenerationTwoStagesOnTwoNodes) {
  const json out = expect_generation(
      fs::path(LIBAI_SOURCE_DIR) / "tests/data/gguf/llama_q4_0.gguf", {.nodes = 2, .pp = 2, .groups = 2},
      "quantize: q4", {.pack_weights = true, .quantize = {ops::Quantization::q4}});
  EXPECT_EQ(out["plan"]["weights"], "q4:32");
}

// Precision per pipeline stage (train.dist.stage_precision auto, choices f32 and q4): three
// nodes, node 2 with memory for less than one f32 layer and its KV cache but for one in q4;
// nodes 0 and 1 roomy. All-f32 does not fit, so the plan puts node 2's stage in q4 and keeps
// the others f32; node 0 sends the choice to the others. The tokens are the same
// mixed-precision model's in one process: loaded whole, q4 but for the f32 stages' layers (and
// the head, when it is not on the q4 stage).
TEST(RunCluster, MixedPrecisionGenerationOverThreeNodesOfUnequalMemory) {
  Cluster cluster;
  const fs::path model = random_gpt2(6);
  const Layout layout{.nodes = 3, .pp = 3, .groups = 3};
  const std::string config = generate_config(cluster, model, layout);
  const std::vector<std::string> precision = {"train.dist.stage_precision=auto",
                                              "train.dist.stage_precision_choices=[f32, q4]"};
  // Node 2's memory from the plan's own per-layer bytes at both precisions.
  actors::ConfigJob job(config::load_libai_config(config, precision, {}), layout.nodes);
  plan::JobShape shape = job.shape();
  const std::vector<DeviceProfile> any(
      3, DeviceProfile{.name = "any", .matmul_gflops = 1, .memory_bandwidth_gbs = 1});
  shape.slot_precision = {0, 0, 0};
  const auto f32 = plan::plan_request(shape, any);
  shape.slot_precision = {1, 1, 1};
  const auto q4 = plan::plan_request(shape, any);
  const double f32_layer = f32.slot_weight_bytes[2][0] + f32.num_micro_batches * f32.kv_cache_bytes[0];
  const double q4_layer = q4.slot_weight_bytes[2][0] + q4.num_micro_batches * q4.kv_cache_bytes[0];
  const double small = 0.95 * f32_layer;
  ASSERT_GT(small, 1.5 * q4_layer + q4.slot_head_bytes[2] + q4.slot_embedding_bytes[2]);
  std::vector<std::string> overrides = precision;
  overrides.insert(overrides.end(),
                   {"train.dist.balance=measured",
                    str_cat("train.cluster.profiles={node2:cpu:0: {free_memory_bytes: ",
                            std::llround(small), "}}")});
  launch_nodes(cluster, config, layout.nodes, free_port(), overrides);
  expect_all_succeed(cluster, layout.nodes);
  const json out = json::parse(cluster.out(0));
  ASSERT_EQ(out["plan"]["weights"], "per stage") << out.dump(2);
  const auto slots = out["plan"]["device_of_stage"].get<std::vector<int>>();
  const auto stage_of = out["plan"]["stage_of"].get<std::vector<int>>();
  const auto precisions = out["plan"]["stage_precision"].get<std::vector<std::string>>();
  ASSERT_EQ(slots.size(), 3u);
  std::vector<std::string> keep;
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(precisions[size_t(s)], slots[size_t(s)] == 2 ? "q4:32" : "f32") << "stage " << s;
    EXPECT_LE(out["plan"]["stage_memory_bytes"][size_t(s)].get<double>(),
              slots[size_t(s)] == 2 ? small : 1e18);
    if (slots[size_t(s)] == 2) continue;
    for (size_t l = 0; l < stage_of.size(); ++l)
      if (stage_of[l] == s) keep.push_back(str_cat("layers.", l));
    if (s == 2) keep.push_back("output");
  }
  // The whole model's module names of those layers.
  auto names = models::load_model(model);
  std::vector<std::string> keep_names;
  for (const auto& k : keep) {
    if (k == "output") keep_names.push_back(k);
    for (const auto& [name, m] : names->named_modules())
      if (name == k || name.ends_with("." + k)) keep_names.push_back(name);
  }
  ASSERT_EQ(keep_names.size(), keep.size());
  const auto expected = eager_tokens(
      model, layout.groups,
      {.pack_weights = true, .quantize = {ops::Quantization::q4}, .quantize_keep = keep_names});
  ASSERT_EQ(out["sequences"].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(out["sequences"][i]["token_ids"].get<std::vector<int64_t>>(), expected[i])
        << "prompt " << i;
  fs::remove_all(model);
}

TEST(RunCluster, Gpt2GenerationFourStagesOnFourNodes) {
  expect_generation({.nodes = 4, .pp = 4, .groups = 4}, 4);
}

TEST(RunCluster, Gpt2GenerationTensorTimesPipelineOnTwoNodes) {
  expect_generation({.nodes = 2, .pp = 2, .tp = 2, .devices_per_node = 2, .groups = 3}, 4);
}

// The balanced plan orders the pipeline slots too: node 0's device holds one layer with the
// head but not one with the embedding (GPT-2's also holds the positions), so stage 0 runs on
// node 1 and stage 1 on node 0; the driver on node 0 feeds stage 0 across processes, and the
// tokens still equal eager mode's.
TEST(RunCluster, Gpt2GenerationWithStageZeroOnNodeOne) {
  Cluster cluster;
  const fs::path model = random_gpt2(4);
  const Layout layout{.nodes = 2, .pp = 2, .groups = 2};
  const std::string config = generate_config(cluster, model, layout);
  actors::ConfigJob job(config::load_libai_config(config, {}, {}), layout.nodes);
  const auto r = plan::plan_request(
      job.shape(), std::vector<DeviceProfile>(
                       2, DeviceProfile{.name = "any", .matmul_gflops = 1, .memory_bandwidth_gbs = 1}));
  const double free = r.weight_bytes[0] + r.num_micro_batches * r.kv_cache_bytes[0] +
                      (r.head.bytes + r.embedding.bytes) / 2;
  ASSERT_LT(r.head.bytes, r.embedding.bytes);
  launch_nodes(cluster, config, layout.nodes, free_port(),
               {"train.dist.balance=measured",
                str_cat("train.cluster.profiles={node0:cpu:0: {free_memory_bytes: ",
                        std::llround(free), "}}")});
  expect_all_succeed(cluster, layout.nodes);
  const json out = json::parse(cluster.out(0));
  EXPECT_EQ(out["plan"]["device_of_stage"], json({1, 0}));
  EXPECT_EQ(out["plan"]["stage_of"], json({0, 0, 0, 1}));
  const auto expected = eager_tokens(model, layout.groups);
  ASSERT_EQ(out["sequences"].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(out["sequences"][i]["token_ids"].get<std::vector<int64_t>>(), expected[i])
        << "prompt " << i;
  fs::remove_all(model);
}

// T5 (three encoder and two decoder layers): PP = 2 on two nodes (the uniform split cuts
// between the stacks), so the encoder's output crosses processes at each group's step 0 and
// one token's decoder states at the later steps. token_ids are the new tokens, as eager
// generate() returns them.
TEST(RunCluster, T5GenerationTwoStagesOnTwoNodes) {
  fs::path model;
  for (auto f : families())
    if (f.name == "t5") {
      f.config["num_layers"] = 3;
      model = save_random_model(f, "run_t5_" + std::to_string(::getpid()));
    }
  Cluster cluster;
  const Layout layout{.nodes = 2, .pp = 2, .groups = 2};
  launch_nodes(cluster, generate_config(cluster, model, layout), layout.nodes, free_port());
  expect_all_succeed(cluster, layout.nodes);
  const json out = json::parse(cluster.out(0));
  auto eager = models::load_model(model);
  models::generation::GenerationConfig config;
  config.max_new_tokens = 6;
  models::pipelines::complete_generation_config(model, eager->config().json(), config);
  std::vector<std::vector<int64_t>> expected;
  for (const auto& group : actors::split_into_groups(kPrompts, layout.groups))
    for (const auto& per_prompt : models::generation::generate(*eager->generative(), group, config))
      expected.push_back(per_prompt[0].tokens);
  ASSERT_EQ(out["sequences"].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(out["sequences"][i]["token_ids"].get<std::vector<int64_t>>(), expected[i])
        << "prompt " << i;
    EXPECT_EQ(out["sequences"][i]["prompt"].get<std::vector<int64_t>>(), kPrompts[i]);
  }
  EXPECT_FALSE(expected[0].empty());
  fs::remove_all(model);
}

// graph.auto_parallel.enabled (Note [Auto parallel of a run job]): node 0 plans every layout of
// the two nodes' devices (the second 3x slower) and number of groups, and the nodes run its
// choice; the tokens equal eager mode's for the groups it chose. `plan` of the same config
// searches the same space on devices like this one.
TEST(RunCluster, Gpt2GenerationWithAutoParallelRunsNodeZerosChoice) {
  Cluster cluster;
  const fs::path model = random_gpt2(4);
  const std::string config = generate_config(
      cluster, model, {.nodes = 2, .pp = 1, .groups = 1},
      "graph: {auto_parallel: {enabled: true}}\n");
  const std::vector<std::string> searched = {
      "train.dist.data_parallel_size=null", "train.dist.pipeline_parallel_size=null",
      "job.num_groups=null", "train.cluster.device_slowdown=[1, 3]"};
  launch_nodes(cluster, config, 2, free_port(), searched);
  expect_all_succeed(cluster, 2);
  std::smatch chosen;
  const std::string log = cluster.err(0);
  ASSERT_TRUE(std::regex_search(log, chosen,
                                std::regex("auto parallel: dp (\\d) x tp 1 x pp (\\d), (\\d+) groups")))
      << log;
  const int dp = std::stoi(chosen[1]), pp = std::stoi(chosen[2]), groups = std::stoi(chosen[3]);
  EXPECT_EQ(dp * pp, 2);
  EXPECT_EQ(groups % dp, 0);
  const json out = json::parse(cluster.out(0));
  EXPECT_EQ(out["plan"]["stage_devices"].size(), size_t(pp));
  const auto expected = eager_tokens(model, groups);
  ASSERT_EQ(out["sequences"].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(out["sequences"][i]["token_ids"].get<std::vector<int64_t>>(), expected[i]) << "prompt " << i;
  std::vector<std::string> plan_args = {"plan", config};
  plan_args.insert(plan_args.end(), searched.begin(), searched.end());
  const int planned = cluster.launch(plan_args);
  ASSERT_EQ(cluster.wait(planned, 60s), 0) << cluster.err(planned);
  EXPECT_NE(cluster.out(planned).find("auto parallel: dp "), std::string::npos) << cluster.out(planned);
  EXPECT_NE(cluster.out(planned).find("next: "), std::string::npos) << cluster.out(planned);
  fs::remove_all(model);
}

TEST(RunCluster, Gpt2GenerationDataTimesPipelineOnTwoNodes) {
  expect_generation({.nodes = 2, .pp = 2, .dp = 2, .devices_per_node = 2, .groups = 4}, 4);
}

TEST(RunCluster, BertEncodingTwoStagesOnTwoNodes) {
  Cluster cluster;
  const std::vector<std::string> texts = {"hello world", "a b c d e f", "the cat sat on the mat",
                                          "x"};
  std::string list = "[";
  for (size_t i = 0; i < texts.size(); ++i) list += (i ? ", \"" : "\"") + texts[i] + "\"";
  list += "]";
  const std::string yaml = str_cat(
      "_base_: [", LIBAI_SOURCE_DIR, "/configs/default.yaml]\n", "model: {weights: ", kModels,
      "bert}\n", "train:\n  dist: {pipeline_parallel_size: 2}\n",
      "  cluster: {nodes: 2, token: test-token, join_timeout: 30.0}\n",
      "job:\n  _target_: encode\n  micro_batch_size: 2\n  texts: ", list, "\n");
  const std::string config = cluster.dir() + "/encode.yaml";
  std::ofstream(config) << yaml;
  launch_nodes(cluster, config, 2, free_port());
  expect_all_succeed(cluster, 2);
  const json out = json::parse(cluster.out(0));
  auto model = models::pipelines::TextModel::load(kModels + "bert");
  const auto expected = models::pipelines::embed(model, texts, 2);
  ASSERT_EQ(out["embeddings"].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto got = out["embeddings"][i].get<std::vector<float>>();
    EXPECT_LT(relative_error(got, expected[i]), 1e-5) << "text " << i;
  }
}

// A synthetic job that runs for minutes unless something ends it (10000 steps of a group per
// stage: few enough that node 0 plans it, simulating every step, well within the second the
// tests below give the job to start).
std::string long_job(const Cluster& cluster, int nodes, double join_timeout = 30.0) {
  const std::string yaml = str_cat(
      "_base_: [", LIBAI_SOURCE_DIR, "/configs/default.yaml]\n",
      "train:\n  dist: {pipeline_parallel_size: ", nodes, ", pipeline_num_layers: ", nodes, "}\n",
      "  cluster: {nodes: ", nodes, ", token: test-token, join_timeout: ", join_timeout, "}\n",
      "job:\n  _target_: synthetic\n  layer_seconds: 0.01\n  num_micro_batches: ", nodes,
      "\n  steps: 10000\n");
  const std::string path = cluster.dir() + "/long.yaml";
  std::ofstream(path) << yaml;
  return path;
}

TEST(RunClusterFaults, AKilledNodeEndsTheJobEverywhereNamingIt) {
  Cluster cluster;
  const std::string config = long_job(cluster, 3);
  launch_nodes(cluster, config, 3, free_port());
  ASSERT_TRUE(cluster.wait_for_log(0, "node 2 (", 30s)) << cluster.err(0);
  std::this_thread::sleep_for(1s);  // the job is running
  cluster.signal(2, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  for (int r : {0, 1}) {
    EXPECT_EQ(cluster.wait(r, 5s), 1) << "node " << r << " did not exit with an error within 5 s";
    EXPECT_NE(cluster.err(r).find("node 2 died (stage 2)"), std::string::npos)
        << "node " << r << ":\n" << cluster.err(r);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 5s);
}

TEST(RunClusterFaults, ANodeKilledWhileTheClusterFormsEndsTheJob) {
  Cluster cluster;
  const std::string config = long_job(cluster, 3);
  launch_nodes(cluster, config, 3, free_port());
  ASSERT_TRUE(cluster.wait_for_log(0, "node 2 (", 30s)) << cluster.err(0);
  cluster.signal(2, SIGKILL);  // while node 0 plans and the data plane forms
  for (int r : {0, 1}) {
    EXPECT_EQ(cluster.wait(r, 5s), 1) << "node " << r << " did not exit with an error within 5 s";
    EXPECT_NE(cluster.err(r).find("node 2 died"), std::string::npos)
        << "node " << r << ":\n" << cluster.err(r);
  }
}

TEST(RunClusterFaults, AKilledNodeZeroEndsTheOthers) {
  Cluster cluster;
  const std::string config = long_job(cluster, 2);
  launch_nodes(cluster, config, 2, free_port());
  ASSERT_TRUE(cluster.wait_for_log(0, "node 1 (", 30s)) << cluster.err(0);
  std::this_thread::sleep_for(1s);
  cluster.signal(0, SIGKILL);
  EXPECT_EQ(cluster.wait(1, 5s), 1);
  EXPECT_NE(cluster.err(1).find("node 0"), std::string::npos) << cluster.err(1);
  EXPECT_NE(cluster.err(1).find("died"), std::string::npos) << cluster.err(1);
}

TEST(RunClusterFaults, ANodeThatNeverJoinsIsNamedAtTheTimeout) {
  Cluster cluster;
  const std::string config = long_job(cluster, 3, /*join_timeout=*/2.0);
  const int port = free_port();
  for (int r : {0, 1})
    cluster.launch({"run", config, "--node-rank", std::to_string(r), "--port", std::to_string(port)});
  EXPECT_EQ(cluster.wait(0, 10s), 1);
  EXPECT_NE(cluster.err(0).find("node(s) 2 did not join within 2 s"), std::string::npos)
      << cluster.err(0);
  EXPECT_EQ(cluster.wait(1, 5s), 1);
  EXPECT_NE(cluster.err(1).find("did not join"), std::string::npos) << cluster.err(1);
}

TEST(RunClusterFaults, AWrongTokenIsRefusedAndLogged) {
  Cluster cluster;
  const std::string config = long_job(cluster, 2, /*join_timeout=*/3.0);
  const int port = free_port();
  cluster.launch({"run", config, "--node-rank", "0", "--port", std::to_string(port)});
  cluster.launch({"run", config, "--node-rank", "1", "--port", std::to_string(port), "--token",
                  "not-the-token"});
  EXPECT_EQ(cluster.wait(1, 10s), 1);
  EXPECT_NE(cluster.err(1).find("refused node 1: wrong cluster token"), std::string::npos)
      << cluster.err(1);
  EXPECT_EQ(cluster.wait(0, 10s), 1);
  EXPECT_NE(cluster.err(0).find("refused a join: wrong cluster token from node 1"), std::string::npos)
      << cluster.err(0);
  EXPECT_EQ(cluster.err(0).find("not-the-token"), std::string::npos) << "tokens are never logged";
}

TEST(RunClusterFaults, CtrlCOnAnyNodeStopsTheWholeJob) {
  Cluster cluster;
  const std::string config = long_job(cluster, 2);
  launch_nodes(cluster, config, 2, free_port());
  ASSERT_TRUE(cluster.wait_for_log(0, "node 1 (", 30s)) << cluster.err(0);
  std::this_thread::sleep_for(1s);
  cluster.signal(1, SIGINT);
  for (int r : {0, 1}) {
    EXPECT_EQ(cluster.wait(r, 5s), 1) << "node " << r;
    EXPECT_NE(cluster.err(r).find("interrupted on node 1"), std::string::npos)
        << "node " << r << ":\n" << cluster.err(r);
  }
}

}  // namespace
}  // namespace libai::testing
