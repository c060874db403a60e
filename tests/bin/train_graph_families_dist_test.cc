// `libai-actor train` with graph.enabled: true for families other than GPT-2, on two real
// processes on loopback (activations, gradients and the groups' collectives over UCX), with
// dropout and activation checkpointing on: a random 4-layer BERT pretraining model (masked LM
// + next sentence, tied decoder) at DP2 x PP2 on the bert dataset, and a random T5 (2 encoder
// + 2 decoder layers, cut at the boundary) at PP2 on the t5 span-corruption dataset. The loss
// of every step equals eager training of the same config on one device (graph.enabled
// false, the replicas' micro-batches accumulated there) within 1e-5 relative.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "tests/bin/cluster.h"
#include "train/data/indexed_dataset.h"

namespace libai::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::map<int64_t, double> losses_of(const fs::path& metrics) {
  std::map<int64_t, double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const json record = json::parse(line);
    if (record.contains("loss") && !record["loss"].is_null())
      out[record["iteration"].get<int64_t>()] = record["loss"].get<double>();
  }
  return out;
}

struct Layout {
  int nodes = 1, dp = 1, pp = 1, accumulation = 2;
  bool graph = true;
  int64_t steps = 12;
};

class TrainGraphFamilies : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(missing_binary(), "");
    // Documents of sentences of random tokens, as a sentence-split preprocessing writes them.
    train::data::IndexedDatasetWriter writer(cluster_.dir() + "/sentences",
                                             train::data::TokenDType::u16);
    std::mt19937 rng(6);
    for (int document = 0; document < 80; ++document) {
      const int sentences = 2 + int(rng() % 4);
      for (int s = 0; s < sentences; ++s) {
        std::vector<int64_t> tokens(4 + rng() % 6);
        for (auto& t : tokens) t = 5 + int64_t(rng() % 90);
        writer.add_sequence(tokens);
      }
      writer.end_document();
    }
    writer.finish();
  }

  void write_model(const std::string& name, const std::string& json_text) {
    std::ofstream(cluster_.dir() + "/" + name + ".json") << json_text;
  }

  std::string write_config(const std::string& name, const std::string& model,
                           const std::string& data, const Layout& l) {
    const std::string configs = LIBAI_SOURCE_DIR "/configs/common/";
    const fs::path out = fs::path(cluster_.dir()) / name;
    const std::string path = cluster_.dir() + "/" + name + ".yaml";
    std::ofstream f(path);
    f << "_base_: [" << configs << "train.yaml, " << configs << "optim.yaml, " << configs
      << "graph.yaml]\n"
      << "graph: {enabled: " << (l.graph ? "true" : "false") << "}\n"
      << "model: {config: " << cluster_.dir() << "/" << model << ".json}\n"
      << "data: " << data << "\n"
      << "optim: {lr: 1.0e-3, clip_grad_norm: 1.0}\n"
      << "train:\n  output_dir: " << out.string() << "\n  train_micro_batch_size: 2\n"
      << "  num_accumulation_steps: " << l.accumulation << "\n  train_iter: " << l.steps
      << "\n  warmup_ratio: 0.2\n  log_period: 1\n  seed: 7\n"
      << "  checkpointer: {period: 100000}\n"
      << "  activation_checkpoint: {enabled: true}\n"
      << "  dist: {data_parallel_size: " << l.dp << ", pipeline_parallel_size: " << l.pp
      << ", pipeline_schedule: 1f1b}\n"
      << "  cluster: {nodes: " << l.nodes << ", token: test-token, join_timeout: 30.0}\n";
    return path;
  }

  std::map<int64_t, double> train(const std::string& name, const std::string& model,
                                  const std::string& data, const Layout& l) {
    const std::string config = write_config(name, model, data, l);
    const int port = free_port();
    std::vector<int> nodes;
    for (int r = 0; r < l.nodes; ++r)
      nodes.push_back(cluster_.launch(
          {"train", config, "--node-rank", std::to_string(r), "--port", std::to_string(port)}));
    for (int n : nodes) {
      const int code = cluster_.wait(n, 120s);
      EXPECT_EQ(code, 0) << name << " node " << n << ":\n" << cluster_.err(n) << cluster_.out(n);
    }
    return losses_of(fs::path(cluster_.dir()) / name / "metrics.json");
  }

  void expect_equals_one_device(const std::string& name, const std::string& model,
                                const std::string& data, const Layout& l) {
    const Layout reference{.accumulation = l.accumulation * l.dp, .graph = false, .steps = l.steps};
    const auto expected = train(name + "_reference", model, data, reference);
    const auto got = train(name, model, data, l);
    ASSERT_EQ(expected.size(), size_t(l.steps));
    ASSERT_EQ(got.size(), size_t(l.steps));
    for (const auto& [iteration, loss] : expected)
      EXPECT_NEAR(got.at(iteration), loss, 1e-5 * std::abs(loss)) << name << " step " << iteration;
    std::printf("%s: loss %.6f at the first step, %.6f at the last (one device: %.6f, %.6f)\n",
                name.c_str(), got.begin()->second, got.rbegin()->second, expected.begin()->second,
                expected.rbegin()->second);
  }

  Cluster cluster_;
};

TEST_F(TrainGraphFamilies, BertPretrainingDataTimesPipelineOnTwoProcessesEqualsOneDevice) {
  write_model("bert", R"({"model_type": "bert", "architectures": ["BertForPreTraining"],
      "vocab_size": 101, "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 4,
      "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2,
      "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "pad_token_id": 0,
      "initializer_range": 0.02, "tie_word_embeddings": true})");
  expect_equals_one_device("bert_dp2_pp2", "bert",
                           "{_target_: bert, prefix: " + cluster_.dir() +
                               "/sentences, seq_length: 24, splits: [1], "
                               "cls_id: 2, sep_id: 3, mask_id: 4, pad_id: 0}",
                           {.nodes = 2, .dp = 2, .pp = 2});
}

TEST_F(TrainGraphFamilies, T5PipelineOnTwoProcessesEqualsOneDevice) {
  write_model("t5", R"({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"],
      "vocab_size": 101, "d_model": 32, "d_kv": 8, "num_heads": 4, "d_ff": 48,
      "num_layers": 2, "num_decoder_layers": 2, "feed_forward_proj": "gated-gelu",
      "tie_word_embeddings": false, "relative_attention_num_buckets": 8,
      "relative_attention_max_distance": 20, "dropout_rate": 0.1,
      "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1,
      "initializer_factor": 0.05})");
  expect_equals_one_device("t5_pp2", "t5",
                           "{_target_: t5, prefix: " + cluster_.dir() +
                               "/sentences, seq_length: 16, splits: [1], sentinel_start: 100}",
                           {.nodes = 2, .pp = 2, .accumulation = 4});
}

}  // namespace
}  // namespace libai::testing
