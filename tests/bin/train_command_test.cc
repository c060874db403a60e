// `libai-actor preprocess` and `libai-actor train` as a user runs them: a fast dev run writes
// everything the trainer promises (checkpoint folders that generate reads, metrics.json,
// TensorBoard events, loss_curve.svg, config.yaml), and bad configs give one clear error
// naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

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

  // A fresh output folder `name` holding out/model_0000002 (named by last_checkpoint), and
  // `train ARGS train.output_dir=<it> --resume` run there; the run must succeed. Returns the
  // folder.
  fs::path resume_step_2(const fs::path& out, const std::string& name, const std::string& args) {
    const fs::path resumed = scratch_.file(name);
    fs::remove_all(resumed);
    fs::create_directories(resumed);
    fs::copy(out / "model_0000002", resumed / "model_0000002", fs::copy_options::recursive);
    std::ofstream(resumed / "last_checkpoint") << "model_0000002\n";
    const Result again = run("train " + args + " train.output_dir=" + resumed.string() + " --resume");
    EXPECT_EQ(again.exit_code, 0) << name << ": " << again.err;
    return resumed;
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
  expect_error("train " + config(gpt2, /*graph_off=*/false) + " train.amp.enabled=true",
               {"train.amp.enabled", "graph.enabled: false"});
  // A slot that cannot be built (3 heads over 2 tensor ranks) ends graph mode with its error
  // (it used to leave the actor system waiting for the driver).
  expect_error("train " + config(gpt2, /*graph_off=*/false) + " train.dist.tensor_parallel_size=2",
               {"tensor_parallel_size 2", "heads 3"});
  expect_error("train " + config("model: {weights: " + kModels + "gpt2, config: " + kModels +
                                 "gpt2/config.json}\n"),
               {"model.weights", "model.config"});
  expect_error("train " + config(gpt2) + " data.prefix=" + scratch_.file("nope"), {"nope"});
  expect_error("train " + config(gpt2) + " train.global_batch_size=7",
               {"train.train_micro_batch_size", "train.global_batch_size"});
  expect_error("train " + config(gpt2) + " optim._target_=adam", {"optim._target_"});
  // Quantized weights are for inference, in eager and graph mode alike.
  const std::string quantized = "model: {weights: " + kModels + "gpt2, quantize: int8}\n";
  expect_error("train " + config(quantized), {"model.quantize", "quantized training"});
  expect_error("train " + config(quantized, /*graph_off=*/false), {"model.quantize", "quantized training"});
}

// The losses metrics.json recorded, by iteration.
std::map<int64_t, double> losses_of(const fs::path& out) {
  std::map<int64_t, double> losses;
  std::ifstream metrics(out / "metrics.json");
  for (std::string line; std::getline(metrics, line);) {
    const json record = json::parse(line);
    if (record.contains("loss")) losses[record.at("iteration")] = record.at("loss");
  }
  return losses;
}

// Eager pipeline training (graph.enabled false, pipeline_parallel_size 2): a fast dev run
// writes everything, its checkpoint is the whole model (generate reads it), and a run resumed
// from its step-2 checkpoint at another layout (one device, and pp 2 x dp 2 under GPipe)
// continues with the losses the uninterrupted pipeline run had.
TEST_F(TrainCommand, PipelineFastDevRunAndResumeAtAnotherLayout) {
  const std::string gpt2 = "model: {weights: " + kModels + "gpt2}\n";
  const Result r = run("train " + config(gpt2) +
                       " train.dist.pipeline_parallel_size=2 train.num_accumulation_steps=2"
                       " train.global_batch_size=4 --fast-dev-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path out = scratch_.file("out");
  for (const char* name : {"metrics.json", "model_final/model.safetensors",
                           "model_final/optimizer.safetensors", "model_best/config.json"})
    EXPECT_TRUE(fs::exists(out / name)) << name;
  const Result generated = run("generate --model " + (out / "model_final").string() +
                               " --prompt-ids 5,6,7 --max-new-tokens 3 --json");
  EXPECT_EQ(generated.exit_code, 0) << generated.err;

  // 4 steps at pp 2 (1f1b), a checkpoint after 2.
  const std::string four = " train.train_iter=4 train.checkpointer.period=2 "
                           "train.num_accumulation_steps=2 train.global_batch_size=4 "
                           "train.evaluation.enabled=false train.log_period=1";
  fs::remove_all(out);
  ASSERT_EQ(run("train " + config(gpt2) + four + " train.dist.pipeline_parallel_size=2").exit_code,
            0);
  const auto whole_run = losses_of(out);
  ASSERT_EQ(whole_run.size(), 4u);
  const std::pair<const char*, const char*> layouts[] = {
      {"resumed1", " train.dist.pipeline_parallel_size=1"},
      {"resumed2", " train.dist.pipeline_parallel_size=2 train.dist.data_parallel_size=2"
                   " train.num_accumulation_steps=1 train.dist.pipeline_schedule=gpipe"}};
  for (const auto& [name, layout] : layouts) {
    const auto losses = losses_of(resume_step_2(out, name, config(gpt2) + four + layout));
    ASSERT_EQ(losses.size(), 2u) << layout;
    for (int64_t i : {3, 4})
      EXPECT_NEAR(losses.at(i), whole_run.at(i), 1e-5 * whole_run.at(i)) << layout << " step " << i;
  }
}

// ZeRO-1 at DP2 x TP2 x PP2 (eight ranks on threads, the eager pipeline): its sharded step-2
// checkpoint (every rank writes its slices: tensor-parallel blocks, the padded vocabulary of
// 503 over 2 ranks, ZeRO ranges of the optimizer state) resumes at TP4 (503 rows over 4) and on
// one device with the losses of the uninterrupted run.
TEST_F(TrainCommand, ZeroCheckpointReshardsFromEightRanksToTensorParallelAndOneDevice) {
  std::ofstream(scratch_.file("model.json"))
      << R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2,
             "n_embd": 32, "n_head": 4, "n_inner": 64, "n_positions": 64, "vocab_size": 503,
             "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "attn_pdrop": 0.1,
             "embd_pdrop": 0.1, "resid_pdrop": 0.1, "initializer_range": 0.02,
             "bos_token_id": 2, "eos_token_id": 2, "tie_word_embeddings": true})";
  const std::string model = "model: {config: " + scratch_.file("model.json") + "}\n";
  const std::string four = " train.train_iter=4 train.checkpointer.period=2 train.global_batch_size=4"
                           " train.evaluation.enabled=false train.log_period=1";
  const fs::path out = scratch_.file("out");
  fs::remove_all(out);
  const Result saved = run("train " + config(model) + four +
                           " train.dist.data_parallel_size=2 train.dist.tensor_parallel_size=2"
                           " train.dist.pipeline_parallel_size=2 train.num_accumulation_steps=1"
                           " train.zero_optimization.enabled=true train.zero_optimization.stage=1");
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  ASSERT_TRUE(fs::exists(out / "model_0000002/layout.json"));
  const auto whole_run = losses_of(out);
  ASSERT_EQ(whole_run.size(), 4u);
  const std::pair<const char*, const char*> layouts[] = {
      {"zero_tp4", " train.dist.tensor_parallel_size=4 train.num_accumulation_steps=2"},
      {"zero_one", " train.num_accumulation_steps=2"}};
  for (const auto& [name, layout] : layouts) {
    const auto losses = losses_of(resume_step_2(out, name, config(model) + four + layout));
    ASSERT_EQ(losses.size(), 2u) << layout;
    for (int64_t i : {3, 4})
      EXPECT_NEAR(losses.at(i), whole_run.at(i), 1e-5 * whole_run.at(i)) << layout << " step " << i;
  }
}

// Graph mode (graph.enabled true: the training stage actors, pp 2 in this process): a fast
// dev run writes every output the eager one does, its losses and evaluation equal eager
// training's on one device, and its final checkpoint (sharded, with the whole weights beside
// the shards) is a model folder generate reads.
TEST_F(TrainCommand, GraphFastDevRunWritesEveryOutputAndEqualsEager) {
  const std::string gpt2 = "model: {weights: " + kModels + "gpt2}\n";
  const std::string batch = " train.num_accumulation_steps=2 train.global_batch_size=4";
  const fs::path out = scratch_.file("out");
  const Result r = run("train " + config(gpt2, /*graph_off=*/false) + batch +
                       " train.dist.pipeline_parallel_size=2 --fast-dev-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("trained steps 0 to 2"), std::string::npos) << r.out;
  for (const char* name : {"metrics.json", "loss_curve.svg", "config.yaml", "last_checkpoint",
                           "model_final/model.safetensors", "model_final/layout.json",
                           "model_final/trainer.json", "model_best/config.json"})
    EXPECT_TRUE(fs::exists(out / name)) << name;
  EXPECT_FALSE(fs::is_empty(out / "tensorboard"));
  auto records = [](const fs::path& dir, const char* key) {
    std::map<int64_t, double> values;
    std::ifstream metrics(dir / "metrics.json");
    for (std::string line; std::getline(metrics, line);) {
      const json record = json::parse(line);
      if (record.contains(key)) values[record.at("iteration")] = record.at(key);
    }
    return values;
  };
  const auto losses = records(out, "loss"), evaluations = records(out, "eval/loss");
  ASSERT_EQ(losses.size(), 2u);
  ASSERT_EQ(evaluations.size(), 1u);
  const Result generated = run("generate --model " + (out / "model_final").string() +
                               " --prompt-ids 5,6,7 --max-new-tokens 3 --json");
  EXPECT_EQ(generated.exit_code, 0) << generated.err;

  const fs::path eager = scratch_.file("eager");
  const Result e = run("train " + config(gpt2) + batch + " train.output_dir=" + eager.string() +
                       " --fast-dev-run");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto eager_losses = records(eager, "loss"), eager_evaluations = records(eager, "eval/loss");
  for (const auto& [i, loss] : eager_losses)
    EXPECT_NEAR(losses.at(i), loss, 1e-5 * std::abs(loss)) << "step " << i;
  for (const auto& [i, loss] : eager_evaluations)
    EXPECT_NEAR(evaluations.at(i), loss, 1e-5 * std::abs(loss)) << "evaluation at " << i;
}

// Graph-mode --eval-only evaluates the checkpoint --resume names, as eager training does.
TEST_F(TrainCommand, GraphEvalOnlyEqualsEager) {
  const std::string gpt2 = "model: {weights: " + kModels + "gpt2}\n";
  const std::string pp2 = " train.dist.pipeline_parallel_size=2";
  ASSERT_EQ(run("train " + config(gpt2, false) + pp2 + " --eval-only").exit_code, 0);
  ASSERT_EQ(
      run("train " + config(gpt2) + " train.output_dir=" + scratch_.file("eager") + " --eval-only")
          .exit_code,
      0);
  auto eval_loss = [](const fs::path& dir) {
    std::ifstream metrics(dir / "metrics.json");
    for (std::string line; std::getline(metrics, line);) {
      const json record = json::parse(line);
      if (record.contains("eval/loss")) return record.at("eval/loss").get<double>();
    }
    return -1.0;
  };
  const double expected = eval_loss(scratch_.file("eager"));
  ASSERT_GT(expected, 0);
  EXPECT_NEAR(eval_loss(scratch_.file("out")), expected, 1e-5 * expected);
}

// A damaged checkpoint folder is one clear error, not a silent fresh start.
TEST_F(TrainCommand, ResumeFromADamagedCheckpointIsAnError) {
  const std::string gpt2 = "model: {weights: " + kModels + "gpt2}\n";
  const fs::path out = scratch_.file("out");
  fs::create_directories(out / "model_0000002");
  std::ofstream(out / "last_checkpoint") << "model_0000002\n";
  expect_error("train " + config(gpt2, false) + " train.dist.pipeline_parallel_size=2 --resume",
               {"last_checkpoint", "no complete checkpoint"});
}

}  // namespace
}  // namespace libai::testing
