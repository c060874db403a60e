// `libai-actor plan` with graph.auto_parallel.enabled (plan/auto_parallel.h): a GPT-2 of 8
// layers and 4 heads on 2 nodes x 2 devices whose profiles are fixed (train.cluster.profiles),
// so the search is deterministic. The chosen layout fits and comes first, the ranking is by
// predicted step time, the config's keys are constraints, memory rejections name the device's
// capacity; with every key fixed and free links the prediction equals the training plan of the
// same layout (plan/train_plan.h, tested on its own); bad settings are one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/config/config.h"
#include "tests/bin/cli_fixture.h"

namespace libai::testing {
namespace {

class AutoParallelPlan : public ModelCommands {
 protected:
  // `free_bytes`: each node's free memory (shared by its 2 devices). Every searched key is null;
  // the tests fix some with command-line overrides.
  std::string config(double free_bytes = 64e9) {
    std::ofstream(scratch_.file("config.json"))
        << R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 8,
               "n_embd": 32, "n_head": 4, "n_inner": 64, "n_positions": 64, "vocab_size": 503,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
               "initializer_range": 0.02, "bos_token_id": 2, "eos_token_id": 2})";
    const std::string configs = LIBAI_SOURCE_DIR "/configs/common/";
    std::string profiles;
    for (int node = 0; node < 2; ++node)
      for (int d = 0; d < 2; ++d)
        profiles += (profiles.empty() ? "" : ", ") + ("node" + std::to_string(node) + ":cpu:" + std::to_string(d)) +
                    ": {matmul_gflops: 100, memory_bandwidth_gbs: 10, layer_seconds: 0.001, "
                    "layer_step_seconds: 0.002, free_memory_bytes: " +
                    std::to_string(int64_t(free_bytes)) + "}";
    const std::string path = scratch_.file("train.yaml");
    std::ofstream(path) << "_base_: [" << configs << "train.yaml, " << configs << "optim.yaml, "
                        << configs << "graph.yaml]\n"
                        << "graph:\n  enabled: true\n  auto_parallel:\n    enabled: true\n"
                        << "    intra_node: {bandwidth_gbs: 20, latency_seconds: 1.0e-5}\n"
                        << "    inter_node: {bandwidth_gbs: 2, latency_seconds: 1.0e-4}\n"
                        << "model: {config: " << scratch_.file("config.json") << "}\n"
                        << "data: {_target_: gpt, prefix: unused, seq_length: 16}\n"
                        << "train:\n  output_dir: " << scratch_.file("out") << "\n"
                        << "  global_batch_size: 8\n  train_micro_batch_size: null\n"
                        << "  activation_checkpoint: {enabled: null}\n"
                        << "  zero_optimization: {enabled: null}\n"
                        << "  dist: {data_parallel_size: null, tensor_parallel_size: null, "
                           "pipeline_parallel_size: null, pipeline_schedule: null, "
                           "virtual_pipeline_size: null, balance: null}\n"
                        << "  cluster: {nodes: 2, devices_per_node: 2, profiles: {" << profiles << "}}\n";
    return path;
  }
};

TEST_F(AutoParallelPlan, RanksEveryLayoutByPredictedStepAndChoosesTheFastestThatFits) {
  const json r = run_json("plan '" + config() + "'");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["devices"], 4);
  const json& ranked = r["ranked"];
  ASSERT_GT(ranked.size(), 10u);
  EXPECT_EQ(int64_t(ranked.size() + r["rejected"].size()), r["evaluated"].get<int64_t>());
  for (size_t i = 0; i < ranked.size(); ++i) {
    const json& layout = ranked[i]["layout"];
    const int dp = layout["data_parallel_size"], tp = layout["tensor_parallel_size"],
              pp = layout["pipeline_parallel_size"];
    EXPECT_EQ(dp * tp * pp, 4);
    EXPECT_EQ(dp * layout["micro_batch_size"].get<int>() * layout["num_accumulation_steps"].get<int>(), 8);
    EXPECT_LE(tp, 2) << "tensor parallelism stays inside a node of 2";
    if (i > 0)
      EXPECT_LE(ranked[i - 1]["estimate"]["step_seconds"].get<double>(),
                ranked[i]["estimate"]["step_seconds"].get<double>());
  }
  const json& best = ranked[0]["layout"];
  const json& overrides = r["overrides"];
  EXPECT_NE(std::find(overrides.begin(), overrides.end(),
                      "train.dist.data_parallel_size=" + std::to_string(best["data_parallel_size"].get<int>())),
            overrides.end());

  const Result text = run("plan '" + config() + "'");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* expected : {"auto parallel: 4 devices (2 node(s) x 2), 8 layers", "chosen: ",
                               "next best:", "not estimated: ", "to run it, set: ",
                               "the chosen layout's plan:", "predicted step time"})
    EXPECT_NE(text.out.find(expected), std::string::npos) << expected << "\nin:\n" << text.out;
}

TEST_F(AutoParallelPlan, TheConfigsKeysAreConstraints) {
  const json r = run_json("plan '" + config() +
                          "' train.dist.tensor_parallel_size=2 train.zero_optimization.enabled=false");
  ASSERT_TRUE(r.is_object());
  ASSERT_FALSE(r["ranked"].empty());
  for (const json& x : r["ranked"]) {
    EXPECT_EQ(x["layout"]["tensor_parallel_size"], 2);
    EXPECT_EQ(x["layout"]["zero_stage"], 0);
  }
}

TEST_F(AutoParallelPlan, LayoutsThatDoNotFitAreRejectedNamingTheCapacity) {
  // 1.4 MB a device: the model state of a whole replica (about 0.1 M parameters x 16 bytes)
  // and its activations do not fit; sharded layouts do.
  const json r = run_json("plan '" + config(2.8e6) + "'");
  ASSERT_TRUE(r.is_object());
  ASSERT_FALSE(r["ranked"].empty());
  ASSERT_FALSE(r["rejected"].empty());
  for (const json& x : r["ranked"])
    EXPECT_LE(x["estimate"]["memory_bytes"].get<double>(), x["estimate"]["memory_cap_bytes"].get<double>());
  bool named = false;
  for (const json& x : r["rejected"])
    named |= x["reason"].get<std::string>().find("GB on a device of 0.0014 GB") != std::string::npos;
  EXPECT_TRUE(named) << r["rejected"][0].dump();
}

TEST_F(AutoParallelPlan, AFixedLayoutOnFreeLinksPredictsWhatTheTrainingPlanDoes) {
  const std::string fixed =
      " train.dist.data_parallel_size=1 train.dist.tensor_parallel_size=1"
      " train.dist.pipeline_parallel_size=4 train.dist.pipeline_schedule=1f1b"
      " train.train_micro_batch_size=2 train.activation_checkpoint.enabled=false"
      " train.zero_optimization.enabled=false";
  const std::string path = config();
  // Free links: the hops cost nothing, as in the training plan without a measured hop.
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (const std::string from : {"bandwidth_gbs: 20, latency_seconds: 1.0e-5", "bandwidth_gbs: 2, latency_seconds: 1.0e-4"})
    text.replace(text.find(from), from.size(), "bandwidth_gbs: 1.0e+12, latency_seconds: 0");
  std::ofstream(path) << text;
  // The even split and the measured one (the training plan's balance: measured) alike.
  for (const std::string balance : {"uniform", "measured"}) {
    const std::string keys = fixed + " train.dist.balance=" + balance;
    const json r = run_json("plan '" + path + "'" + keys);
    ASSERT_TRUE(r.is_object());
    ASSERT_EQ(r["ranked"].size(), 1u);
    const json plain = run_json("plan '" + path + "'" + keys +
                                " graph.auto_parallel.enabled=false train.num_accumulation_steps=4");
    ASSERT_TRUE(plain.is_object());
    EXPECT_NEAR(r["ranked"][0]["estimate"]["step_seconds"].get<double>(), plain["step_seconds"].get<double>(),
                1e-9 * plain["step_seconds"].get<double>())
        << balance;
  }
}

TEST_F(AutoParallelPlan, BadSettingsAreOneClearError) {
  expect_error("plan '" + config() + "' train.global_batch_size=null",
               {"graph.auto_parallel.enabled: set train.global_batch_size"});
  expect_error("plan '" + config() + "' train.num_accumulation_steps=2",
               {"train.num_accumulation_steps follows from the global batch"});
  expect_error("plan '" + config() + "' train.dist.tensor_parallel_size=4",
               {"auto parallel: no layout of 4 devices divides",
                "tp not dividing a node's 2 devices"});
  expect_error("plan '" + config() + "' train.dist.balance=memory",
               {"train.dist.balance is memory", "uniform and measured"});
  expect_error("plan '" + config() + "' train.dist.custom_pipeline_stage_id=[0,0,0,0,1,1,1,1]",
               {"custom_pipeline_stage_id fixes the split of one layout"});
  expect_error("train '" + config() + "' graph.enabled=false",
               {"graph.auto_parallel.enabled", "runs in `libai-actor plan`"});
  EXPECT_FALSE(std::filesystem::exists(scratch_.file("out"))) << "refused before writing anything";
}

}  // namespace
}  // namespace libai::testing

namespace libai::testing {
namespace {

// `train` on one node applies the search's choice: the layout `plan` chooses for the same
// config runs, and the resolved config in the output folder holds it (auto_parallel off), so
// that running that file again runs the same layout.
TEST_F(AutoParallelPlan, TrainOnOneNodeRunsTheChosenLayout) {
  const std::string corpus = scratch_.file("corpus.txt");
  {
    std::ofstream f(corpus);
    for (int line = 0; line < 200; ++line) f << "the quick brown fox jumps over the lazy dog " << line << "\n";
  }
  const Result pre = run("preprocess --input '" + corpus + "' --tokenizer '" + kModels +
                         "gpt2' --output-prefix '" + scratch_.file("corpus") + "' --append-eod");
  ASSERT_EQ(pre.exit_code, 0) << pre.err;
  const std::string one_node = " train.cluster.nodes=1 train.train_iter=2 train.log_period=1 data.prefix='" +
                               scratch_.file("corpus_text_document") + "'";
  const std::string path = config();
  const json planned = run_json("plan '" + path + "'" + one_node);
  ASSERT_TRUE(planned.is_object());
  ASSERT_EQ(planned["devices"], 2);
  const Result trained = run("train '" + path + "'" + one_node);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_NE((trained.out + trained.err)
                .find("auto parallel: " + planned["ranked"][0]["layout"]["description"].get<std::string>()),
            std::string::npos)
      << trained.out << trained.err;
  EXPECT_NE(trained.out.find("trained steps 0 to 2"), std::string::npos) << trained.out;
  const config::Config resolved = config::Config::load(scratch_.file("out") + "/config.yaml");
  EXPECT_FALSE(resolved.get<bool>("graph.auto_parallel.enabled"));
  const json& layout = planned["ranked"][0]["layout"];
  EXPECT_EQ(resolved.get<int>("train.dist.data_parallel_size"), layout["data_parallel_size"].get<int>());
  EXPECT_EQ(resolved.get<int>("train.dist.tensor_parallel_size"), layout["tensor_parallel_size"].get<int>());
  EXPECT_EQ(resolved.get<int>("train.dist.pipeline_parallel_size"), layout["pipeline_parallel_size"].get<int>());
  EXPECT_EQ(resolved.get<int64_t>("train.train_micro_batch_size"), layout["micro_batch_size"].get<int64_t>());
}

}  // namespace
}  // namespace libai::testing
