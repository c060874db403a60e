// `libai-actor preprocess` and `libai-actor train` as a user runs them: a fast dev run writes
// everything the trainer promises (checkpoint folders that generate reads, metrics.json,
// TensorBoard events, loss_curve.svg, config.yaml), and bad configs give one clear error
// naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/bin/cli_fixture.h"

namespace libai::testing {
namespace {

namespace fs = std::filesystem;

class TrainCommand : public ModelCommands {
 protected:
  void SetUp() override {
    ModelCommands::SetUp();
    if (IsSkipped()) return;
    std::ofstream text(scratch_.file("corpus.txt"));
    for (int line = 0; line < 200; ++line)
      text << "the quick brown fox " << line << " jumps over the lazy dog\n";
    text.close();
    const Result r =
        run("preprocess --input " + scratch_.file("corpus.txt") + " --tokenizer " + kModels +
            "gpt2 --output-prefix " + scratch_.file("corpus") + " --append-eod");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // A training config over the preprocessed corpus; `extra` is appended (YAML).
  std::string config(const std::string& extra, bool graph_off = true) {
    const std::string configs = LIBAI_SOURCE_DIR "/configs/common/";
    std::string yaml = "_base_: [" + configs + "train.yaml, " + configs + "optim.yaml, " + configs +
                       "graph.yaml, " + configs + "data.yaml]\n";
    if (graph_off) yaml += "graph: {enabled: false}\n";
    yaml += "data: {_target_: gpt, prefix: " + scratch_.file("corpus_text_document") +
            ", seq_length: 8, splits: [9, 1]}\n";
    yaml += "train: {output_dir: " + scratch_.file("out") +
            ", train_micro_batch_size: 2, evaluation: {enabled: true}}\n";
    yaml += extra;
    return scratch_.write("train.yaml", yaml);
  }
};

TEST_F(TrainCommand, FastDevRunWritesEveryOutput) {
  const Result r =
      run("train " + config("model: {weights: " + kModels + "gpt2}\n") + " --fast-dev-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("trained steps 0 to 2"), std::string::npos) << r.out;
  const fs::path out = scratch_.file("out");
  for (const char* name : {"metrics.json", "loss_curve.svg", "config.yaml", "last_checkpoint",
                           "model_final/model.safetensors", "model_final/optimizer.safetensors",
                           "model_final/trainer.json", "model_best/config.json"})
    EXPECT_TRUE(fs::exists(out / name)) << name;
  EXPECT_FALSE(fs::is_empty(out / "tensorboard"));
  // Two steps and one evaluation in metrics.json.
  std::ifstream metrics(out / "metrics.json");
  int steps = 0, evaluations = 0;
  for (std::string line; std::getline(metrics, line);) {
    const json record = json::parse(line);
    steps += record.contains("loss");
    evaluations += record.contains("eval/loss");
  }
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(evaluations, 1);
  // The final checkpoint is a model folder the other commands read.
  const Result generated = run("generate --model " + (out / "model_final").string() +
                               " --prompt-ids 5,6,7 "
                               "--max-new-tokens 3 --json");
  EXPECT_EQ(generated.exit_code, 0) << generated.err;
}

TEST_F(TrainCommand, BadConfigsNameTheKey) {
  const std::string gpt2 = "model: {weights: " + kModels + "gpt2}\n";
  // Graph mode (the actor runtime) refuses what it cannot do yet, naming the key.
  expect_error("train " + config(gpt2, /*graph_off=*/false) + " train.evaluation.enabled=true",
               {"train.evaluation.enabled", "graph.enabled: false"});
  expect_error("train " + config("model: {weights: " + kModels + "gpt2, config: " + kModels +
                                 "gpt2/config.json}\n"),
               {"model.weights", "model.config"});
  expect_error("train " + config(gpt2) + " data.prefix=" + scratch_.file("nope"), {"nope"});
  expect_error("train " + config(gpt2) + " train.global_batch_size=7",
               {"train.train_micro_batch_size", "train.global_batch_size"});
  expect_error("train " + config(gpt2) + " train.zero_optimization.enabled=true",
               {"train.zero_optimization"});
  expect_error("train " + config(gpt2) + " optim._target_=adam", {"optim._target_"});
}

}  // namespace
}  // namespace libai::testing
