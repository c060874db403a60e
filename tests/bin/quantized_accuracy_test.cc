// Quantized inference on a trained model (issue 34): the demo's character GPT trained from
// scratch here (`libai-actor preprocess` and `train` on five Shakespeare plays, 200 steps),
// then loaded with int8, int8-dynamic and 4-bit weights: perplexity on held-out text (the
// corpus's last paragraphs, in the validation split) within 1% of f32 for int8 and 5% for
// 4-bit, and greedy continuations of held-out lines compared token by token with f32's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "models/generation/generate.h"
#include "models/pipelines/pipelines.h"
#include "ops/packed_linear.h"
#include "tests/bin/cli_fixture.h"

namespace libai::testing {
namespace {

namespace fs = std::filesystem;
using models::LoadOptions;
using models::pipelines::TextModel;

constexpr int64_t kSeq = 128, kWindows = 16;

class QuantizedAccuracy : public ModelCommands {
 protected:
  void SetUp() override {
    ModelCommands::SetUp();
    if (IsSkipped()) return;
    const std::string source = LIBAI_SOURCE_DIR;
    const Result pre = run("preprocess --input " + source + "/data/shakespeare/plays.txt" +
                           " --tokenizer " + source + "/configs/demo/char_gpt --output-prefix " +
                           scratch_.file("plays") + " --split-paragraphs --append-eod");
    ASSERT_EQ(pre.exit_code, 0) << pre.err;
    const Result trained = run(
        "train " + source + "/configs/demo/train_char_gpt.yaml model.config=" + source +
        "/configs/demo/char_gpt/config.json data.prefix=" + scratch_.file("plays_text_document") +
        " train.output_dir=" + scratch_.file("out") +
        " train.train_iter=200 train.evaluation.enabled=false train.checkpointer.period=1000"
        " train.log_period=100");
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    folder_ = scratch_.file("out") + "/model_final";
    std::ifstream in(source + "/data/shakespeare/plays.txt");
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    held_out_ = all.substr(all.size() - size_t(kWindows * (kSeq + 1) + 2000));
  }

  // Mean next-character cross entropy over kWindows windows of kSeq + 1 characters.
  double perplexity(TextModel& m) {
    const auto ids = m.tokenizer().encode(held_out_, /*add_special_tokens=*/false).ids;
    EXPECT_GE(int64_t(ids.size()), kWindows * (kSeq + 1));
    std::vector<int64_t> inputs;
    for (int64_t w = 0; w < kWindows; ++w)
      for (int64_t t = 0; t < kSeq; ++t) inputs.push_back(ids[size_t(w * (kSeq + 1) + t)]);
    const Tensor logits = m.model()
                              .forward({{"input_ids", Tensor::from_vector(inputs, {kWindows, kSeq})}})
                              .at("logits");  // [windows, seq, vocab]
    const int64_t vocab = logits.size(-1);
    const auto v = logits.clone_raw().to_vector<float>();
    double nll = 0.0;
    for (int64_t w = 0; w < kWindows; ++w)
      for (int64_t t = 0; t < kSeq; ++t) {
        const float* row = v.data() + (w * kSeq + t) * vocab;
        double top = row[0];
        for (int64_t j = 1; j < vocab; ++j) top = std::max(top, double(row[j]));
        double sum = 0.0;
        for (int64_t j = 0; j < vocab; ++j) sum += std::exp(double(row[j]) - top);
        const int64_t target = ids[size_t(w * (kSeq + 1) + t + 1)];
        nll += std::log(sum) + top - double(row[target]);
      }
    return std::exp(nll / double(kWindows * kSeq));
  }

  // Greedy continuations (32 characters) of 20 held-out lines.
  std::vector<std::vector<int64_t>> greedy(TextModel& m) {
    std::vector<std::string> prompts;
    std::istringstream lines(held_out_.substr(held_out_.size() - 2000));
    for (std::string line; std::getline(lines, line) && prompts.size() < 20;)
      if (line.size() >= 12) prompts.push_back(line.substr(0, 12));
    EXPECT_EQ(prompts.size(), 20u);
    models::generation::GenerationConfig config;
    config.max_new_tokens = 32;
    std::vector<std::vector<int64_t>> out;
    for (const auto& g : models::pipelines::generate_text(m, prompts, config))
      out.push_back(g.token_ids);
    return out;
  }

  std::string folder_, held_out_;
};

TEST_F(QuantizedAccuracy, PerplexityAndGreedyTokensStayCloseToF32) {
  auto reference = TextModel::load(folder_, {.pack_weights = true});
  const double f32 = perplexity(reference);
  const auto f32_tokens = greedy(reference);
  std::printf("  f32: held-out perplexity %.4f\n", f32);
  EXPECT_LT(f32, 25.0) << "the model did not train (78 characters: about 78 untrained)";
  struct Case {
    const char* spec;
    double bound;  // relative perplexity
  };
  for (const Case& c : {Case{"int8", 0.01}, Case{"int8-dynamic", 0.01}, Case{"q4:32", 0.05},
                        Case{"q4:64:min", 0.05}}) {
    SCOPED_TRACE(c.spec);
    LoadOptions options{.pack_weights = true, .quantize = ops::parse_quantization(c.spec, "test")};
    auto quantized = TextModel::load(folder_, options);
    const double ppl = perplexity(quantized);
    const auto tokens = greedy(quantized);
    int equal = 0;
    for (size_t i = 0; i < tokens.size(); ++i) equal += tokens[i] == f32_tokens[i] ? 1 : 0;
    std::printf("  %s: held-out perplexity %.4f (%+.3f%% of f32), greedy continuations equal "
                "to f32's: %d of %zu\n",
                c.spec, ppl, 100.0 * (ppl / f32 - 1.0), equal, tokens.size());
    EXPECT_LE(std::fabs(ppl / f32 - 1.0), c.bound);
    // The quantization is visible: the products differ from f32's.
    EXPECT_NE(ppl, f32);
    if (std::string(c.spec).rfind("int8", 0) == 0) EXPECT_GE(equal, 14) << "most prompts";
  }
}

}  // namespace
}  // namespace libai::testing
