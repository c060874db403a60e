// generate()'s sampling on the toy models (toy_generation.h): top_k = 1 is greedy, seeds are
// deterministic and per prompt, and first-token frequencies over many seeds follow
// softmax(logits / temperature) over the tokens top_k and top_p keep, computed here.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "models/generation/generate.h"
#include "toy_generation.h"

namespace libai::models::generation {
namespace {

using namespace toy;

TEST(GenerateSampling, TopK1IsGreedyAndSeedsAreDeterministic) {
  ToyModel model(7, hashed_logits(7));
  const std::vector<Tokens> prompts = {{3, 1, 4}, {2, 6}};
  GenerationConfig greedy;
  greedy.max_new_tokens = 12;
  GenerationConfig sample = greedy;
  sample.do_sample = true;
  sample.temperature = 0.8;
  sample.seed = 7;
  GenerationConfig top1 = sample;
  top1.top_k = 1;
  auto expected = generate(model, prompts, greedy);
  auto got = generate(model, prompts, top1);
  for (size_t p = 0; p < prompts.size(); ++p) EXPECT_EQ(got[p][0].tokens, expected[p][0].tokens);

  auto first = generate(model, prompts, sample);
  auto again = generate(model, prompts, sample);
  sample.seed = 8;
  auto other_seed = generate(model, prompts, sample);
  for (size_t p = 0; p < prompts.size(); ++p) {
    EXPECT_EQ(first[p][0].tokens, again[p][0].tokens);
    EXPECT_EQ(first[p][0].score, again[p][0].score);
    EXPECT_NE(first[p][0].tokens, other_seed[p][0].tokens);
  }
  // A prompt's samples depend on its index, not on the other prompts of the batch.
  sample.seed = 7;
  auto other_batch = generate(model, {{3, 1, 4}, {5}, {1, 1}}, sample);
  EXPECT_EQ(other_batch[0][0].tokens, first[0][0].tokens);
  // Several samples per prompt: distinct draws, best first.
  sample.num_return_sequences = 4;
  auto several = generate(model, {{3, 1, 4}}, sample);
  ASSERT_EQ(several[0].size(), 4u);
  for (size_t i = 1; i < 4; ++i) EXPECT_GE(several[0][i - 1].score, several[0][i].score);
  EXPECT_NE(several[0][0].tokens, several[0][3].tokens);
}

// First-token frequencies over many seeds against softmax(logits / temperature) renormalised
// over `allowed`; tokens outside it must never be drawn.
void check_first_token_frequencies(ToyModel& model, const Tokens& prompt, GenerationConfig config,
                                   const std::vector<bool>& allowed) {
  const std::vector<float> logits = model.logits_for({prompt, prompt});
  std::vector<double> scaled;
  for (size_t v = 0; v < logits.size(); ++v) {
    scaled.push_back(allowed[v] ? double(logits[v]) / config.temperature : -INFINITY);
  }
  const std::vector<double> expected = softmax(scaled);
  const int samples = 20000;
  std::vector<int> counts(logits.size(), 0);
  config.max_new_tokens = 1;
  config.do_sample = true;
  for (int seed = 0; seed < samples; ++seed) {
    config.seed = uint64_t(seed);
    ++counts[size_t(generate(model, {prompt}, config)[0][0].tokens.at(0))];
  }
  for (size_t v = 0; v < counts.size(); ++v) {
    if (!allowed[v]) {
      EXPECT_EQ(counts[v], 0) << "token " << v << " is outside the kept set";
    }
    // Binomial standard deviation <= 0.0036 at 20000 samples: 0.02 is over 5 sigma.
    EXPECT_NEAR(double(counts[v]) / samples, expected[v], 0.02) << "token " << v;
  }
}

std::vector<size_t> by_descending(const std::vector<float>& logits) {
  std::vector<size_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  return order;
}

TEST(GenerateSampling, FrequenciesFollowTemperatureAndTopK) {
  ToyModel model(7, hashed_logits(7));
  const Tokens prompt = {2, 4};
  GenerationConfig config;
  config.temperature = 0.7;
  config.top_k = 3;
  const auto order = by_descending(model.logits_for({prompt, prompt}));
  std::vector<bool> allowed(7, false);
  for (size_t i = 0; i < 3; ++i) allowed[order[i]] = true;
  check_first_token_frequencies(model, prompt, config, allowed);
}

TEST(GenerateSampling, FrequenciesFollowTopP) {
  ToyModel model(7, hashed_logits(7));
  const Tokens prompt = {5, 1};
  GenerationConfig config;
  config.temperature = 1.3;
  config.top_k = 0;
  const std::vector<float> logits = model.logits_for({prompt, prompt});
  std::vector<double> scaled;
  for (float l : logits) scaled.push_back(l / 1.3);
  const std::vector<double> p = softmax(scaled);
  const auto order = by_descending(logits);
  // The smallest set of most likely tokens whose mass reaches top_p: here the top three.
  const double mass2 = p[order[0]] + p[order[1]], mass3 = mass2 + p[order[2]];
  config.top_p = (mass2 + mass3) / 2;
  std::vector<bool> allowed(7, false);
  for (size_t i = 0; i < 3; ++i) allowed[order[i]] = true;
  check_first_token_frequencies(model, prompt, config, allowed);
}

}  // namespace
}  // namespace libai::models::generation
