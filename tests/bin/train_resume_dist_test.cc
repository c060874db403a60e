// `libai-actor train` killed with SIGKILL and resumed with --resume: the losses of every step
// are bitwise those of the run that was never stopped (dropout on, so the masks must resume
// too), for a GPT-2 fine-tuning run (data from `libai-actor preprocess`) and a BERT
// pretraining run (MLM + NSP from an indexed dataset of sentences). One kill lands at a
// random step (after k logged steps, k drawn from a seeded generator); the other as soon as
// a checkpoint's temporary folder appears, i.e. during a checkpoint write.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "tests/bin/cluster.h"
#include "train/data/indexed_dataset.h"

namespace libai::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// iteration -> loss of the last record for that iteration in metrics.json (a resumed run
// appends the steps it redoes after the last checkpoint).
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

int64_t lines_of(const fs::path& file) {
  std::ifstream in(file);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

bool writing_checkpoint(const fs::path& output_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(output_dir, ec))
    if (entry.path().filename().string().rfind(".tmp-", 0) == 0) return true;
  return false;
}

class TrainResume : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(missing_binary(), "");
  }

  // A config training `model` on `data` (YAML of the data section) into `out`.
  std::string write_config(const std::string& name, const std::string& model,
                           const std::string& data, const fs::path& out) {
    const std::string configs = LIBAI_SOURCE_DIR "/configs/common/";
    const std::string path = cluster_.dir() + "/" + name + ".yaml";
    std::ofstream f(path);
    f << "_base_: [" << configs << "train.yaml, " << configs << "optim.yaml, " << configs
      << "graph.yaml]\n"
      << "graph: {enabled: false}\n"
      << "model: {weights: " << model << "}\n"
      << "data: " << data << "\n"
      << "optim: {lr: 1.0e-3}\n"
      << "train:\n  output_dir: " << out.string() << "\n  train_micro_batch_size: 2\n"
      << "  num_accumulation_steps: 2\n  train_iter: 12\n  warmup_ratio: 0.2\n  log_period: 1\n"
      << "  seed: 7\n  checkpointer: {period: 2, max_to_keep: 2}\n";
    return path;
  }

  // Returns the step the run started at ("trained steps K to N").
  int64_t train(const std::string& config, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"train", config};
    args.insert(args.end(), extra.begin(), extra.end());
    const int node = cluster_.launch(args);
    const int code = cluster_.wait(node, 120s);
    EXPECT_EQ(code, 0) << read_file(cluster_.dir() + "/node" + std::to_string(node) + ".err");
    const std::string out = read_file(cluster_.dir() + "/node" + std::to_string(node) + ".out");
    long long first = -1, last = -1;
    EXPECT_EQ(std::sscanf(out.c_str(), "trained steps %lld to %lld", &first, &last), 2) << out;
    return first;
  }

  // Runs `config` and kills it when `kill_now(output_dir)` says so; returns whether it was
  // killed before it finished.
  template <typename Predicate>
  bool train_and_kill(const std::string& config, const fs::path& out, Predicate kill_now) {
    const int node = cluster_.launch({"train", config});
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (kill_now(out)) {
        cluster_.signal(node, SIGKILL);
        return cluster_.wait(node, 30s) == 128 + SIGKILL;
      }
      if (cluster_.wait(node, 0ms) >= 0) return false;  // finished first
      std::this_thread::sleep_for(200us);
    }
    ADD_FAILURE() << "training did not finish";
    return false;
  }

  void expect_resume_is_bitwise(const std::string& model, const std::string& data) {
    const fs::path reference = fs::path(cluster_.dir()) / "reference";
    train(write_config("reference", model, data, reference));
    const auto expected = losses_of(reference / "metrics.json");
    ASSERT_EQ(expected.size(), 12u);

    std::mt19937 rng(2026);
    const int64_t kill_after = std::uniform_int_distribution<int64_t>(3, 9)(rng);
    struct Case {
      std::string name;
      std::function<bool(const fs::path&)> kill_now;
    };
    const std::vector<Case> cases = {
        {"at_step",
         [&](const fs::path& out) { return lines_of(out / "metrics.json") >= kill_after; }},
        // The second checkpoint's write (step 4): the first one (step 2) is complete.
        {"during_write",
         [&](const fs::path& out) {
           return lines_of(out / "metrics.json") >= 3 && writing_checkpoint(out);
         }},
    };
    for (const auto& c : cases) {
      SCOPED_TRACE(c.name);
      // A checkpoint write takes milliseconds: on a fast disk the poll may miss every one, so
      // a run that finished first is tried again in a fresh folder.
      fs::path out;
      std::string config;
      bool killed = false;
      for (int attempt = 0; attempt < 5 && !killed; ++attempt) {
        const std::string name = c.name + "_" + std::to_string(attempt);
        out = fs::path(cluster_.dir()) / name;
        config = write_config(name, model, data, out);
        killed = train_and_kill(config, out, c.kill_now);
      }
      const int64_t logged = lines_of(out / "metrics.json");
      ASSERT_TRUE(killed) << "every run finished before the kill";
      const int64_t resumed_at = train(config, {"--resume"});
      std::printf("%s: killed after %lld logged steps, resumed at step %lld\n", c.name.c_str(),
                  (long long)logged, (long long)resumed_at);
      // It really resumed: from a checkpoint (every 2 steps), not from the start.
      EXPECT_GE(resumed_at, 2);
      EXPECT_LE(resumed_at, logged);
      const auto got = losses_of(out / "metrics.json");
      ASSERT_EQ(got.size(), expected.size());
      for (const auto& [iteration, loss] : expected)
        EXPECT_EQ(got.at(iteration), loss) << "step " << iteration << " differs after the resume";
    }
  }

  Cluster cluster_;
};

TEST_F(TrainResume, Gpt2FineTuningResumesBitwise) {
  // Text -> indexed dataset with the fixture's own tokenizer, as a user prepares data.
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
  const int node = cluster_.launch({"preprocess", "--input", text, "--tokenizer", kModels + "gpt2",
                                    "--output-prefix", cluster_.dir() + "/corpus", "--append-eod"});
  ASSERT_EQ(cluster_.wait(node, 60s), 0) << read_file(cluster_.dir() + "/node0.err");
  expect_resume_is_bitwise(kModels + "gpt2", "{_target_: gpt, prefix: " + cluster_.dir() +
                                                 "/corpus_text_document, "
                                                 "seq_length: 16, splits: [1]}");
}

TEST_F(TrainResume, BertPretrainingResumesBitwise) {
  // Sentences grouped in documents, as a sentence-split preprocessing writes them.
  const std::string prefix = cluster_.dir() + "/sentences";
  {
    train::data::IndexedDatasetWriter writer(prefix, train::data::TokenDType::u16);
    std::mt19937 rng(6);
    for (int document = 0; document < 60; ++document) {
      const int sentences = 2 + int(rng() % 4);
      for (int s = 0; s < sentences; ++s) {
        std::vector<int64_t> tokens(4 + rng() % 6);
        for (auto& t : tokens) t = 5 + int64_t(rng() % 398);
        writer.add_sequence(tokens);
      }
      writer.end_document();
    }
    writer.finish();
  }
  expect_resume_is_bitwise(kModels + "bert_pretraining",
                           "{_target_: bert, prefix: " + prefix +
                               ", seq_length: 24, splits: [1], "
                               "cls_id: 2, sep_id: 3, mask_id: 4, pad_id: 0}");
}

}  // namespace
}  // namespace libai::testing
