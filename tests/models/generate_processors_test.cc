// The logits processors (repetition penalty, no-repeat n-grams, min_new_tokens) by hand, alone
// and through generate() on toy models with fixed logits (toy_generation.h).
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "models/generation/generate.h"
#include "models/generation/logits_process.h"
#include "toy_generation.h"

namespace libai::models::generation {
namespace {

using namespace toy;

TEST(GenerateProcessors, RepetitionPenaltyHandChecked) {
  std::vector<float> scores = {2.0f, -1.0f, 0.5f, 3.0f};
  apply_repetition_penalty(scores, Tokens{0, 1, 0}, 2.0);
  EXPECT_EQ(scores, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));

  // Token 0 is in the prompt: 2.0 / 1.2 = 1.67 < 1.9 picks 1; then both are penalised and 0
  // wins (1.67 > 1.58). With negative logits the penalty multiplies: -1.2 < -1.1.
  GenerationConfig config;
  config.max_new_tokens = 3;
  config.repetition_penalty = 1.2;
  ToyModel positive(4, fixed_logits({2.0f, 1.9f, -0.5f, -0.6f}));
  EXPECT_EQ(generate(positive, {{0}}, config)[0][0].tokens, (Tokens{1, 0, 0}));
  ToyModel negative(4, fixed_logits({-1.0f, -1.1f, -3.0f, -4.0f}));
  EXPECT_EQ(generate(negative, {{0}}, config)[0][0].tokens, (Tokens{1, 0, 0}));
  config.repetition_penalty = 1.0;
  EXPECT_EQ(generate(positive, {{0}}, config)[0][0].tokens, (Tokens{0, 0, 0}));
}

TEST(GenerateProcessors, NoRepeatNgramHandChecked) {
  const Tokens context = {1, 2, 3, 1, 2};
  auto banned = [&](int64_t n) {
    std::vector<float> scores(5, 0.0f);
    ban_repeated_ngrams(scores, context, n);
    Tokens out;
    for (int64_t v = 0; v < 5; ++v) {
      if (std::isinf(scores[size_t(v)])) out.push_back(v);
    }
    return out;
  };
  EXPECT_EQ(banned(3), (Tokens{3}));        // "1 2 3" seen, prefix "1 2"
  EXPECT_EQ(banned(2), (Tokens{3}));        // "2 3" seen, prefix "2"
  EXPECT_EQ(banned(1), (Tokens{1, 2, 3}));  // every seen token
  EXPECT_EQ(banned(6), (Tokens{}));         // context shorter than n

  // Preference 1 > 2 > 3 > 0, bigrams may not repeat: 1 (no bigram yet), 2 ("1 1" seen),
  // 1, 3 ("1 1" and "1 2" seen), 1.
  GenerationConfig config;
  config.max_new_tokens = 5;
  config.no_repeat_ngram_size = 2;
  ToyModel model(4, fixed_logits({0.0f, 3.0f, 2.0f, 1.0f}));
  EXPECT_EQ(generate(model, {{1}}, config)[0][0].tokens, (Tokens{1, 2, 1, 3, 1}));
}

TEST(GenerateProcessors, MinNewTokensSuppressesEos) {
  ToyModel model(4, fixed_logits({5.0f, 1.0f, 0.5f, 0.0f}));  // eos (0) always wins
  GenerationConfig config;
  config.max_new_tokens = 10;
  config.eos_token_ids = {0};
  EXPECT_EQ(generate(model, {{2}}, config)[0][0].tokens, (Tokens{0}));
  config.min_new_tokens = 3;
  EXPECT_EQ(generate(model, {{2}}, config)[0][0].tokens, (Tokens{1, 1, 1, 0}));
  config.num_beams = 2;
  EXPECT_EQ(generate(model, {{2}}, config)[0][0].tokens.size(), 4u);
}

}  // namespace
}  // namespace libai::models::generation
