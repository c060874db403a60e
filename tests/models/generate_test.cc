// generate()'s greedy search on toy models whose next-token logits are a pure function of each
// row's history, checked against step-by-step argmax written without generate.cc, and its
// configuration errors. The other searches and the processors: generate_sampling_test.cc,
// generate_beam_test.cc, generate_processors_test.cc; token ids and scores against Hugging Face
// transformers: generate_transformers_test.cc; the toys: toy_generation.h.
#include "models/generation/generate.h"

#include <algorithm>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "runtime/error.h"
#include "toy_generation.h"

namespace libai::models::generation {
namespace {

using namespace toy;

TEST(GenerateGreedy, MatchesStepwiseArgmaxAndFeedsPadToFinishedRows) {
  // Prompt {3, ...} is pushed to eos (0) once its history has 3 tokens, so it stops after two
  // new tokens while the others run to max_new_tokens.
  auto hashed = hashed_logits(7);
  ToyModel model(7, [&](const Row& row) {
    std::vector<float> l = hashed(row);
    if (row.prompt[0] == 3 && row.history.size() == 3) l[0] += 20;
    return l;
  });
  const std::vector<Tokens> prompts = {{3, 1}, {2}, {6, 6, 5, 1}};
  GenerationConfig config;
  config.max_new_tokens = 9;
  config.eos_token_ids = {0};
  config.pad_token_id = 5;
  auto results = generate(model, prompts, config);
  ASSERT_EQ(results.size(), 3u);
  size_t steps = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    ASSERT_EQ(results[p].size(), 1u);
    GeneratedSequence expected = reference_greedy(model, {prompts[p], prompts[p]}, 9, {0});
    EXPECT_EQ(results[p][0].tokens, expected.tokens) << "prompt " << p;
    EXPECT_NEAR(results[p][0].score, expected.score, 1e-4);
    steps = std::max(steps, expected.tokens.size());
  }
  EXPECT_EQ(results[0][0].tokens, (Tokens{results[0][0].tokens[0], 0}));
  EXPECT_GT(steps, 2u);
  // The session saw every row's tokens, then pads once finished, except the last step's.
  ASSERT_EQ(model.log->rows.size(), 3u);
  for (size_t p = 0; p < prompts.size(); ++p) {
    Tokens fed = results[p][0].tokens;
    fed.resize(steps, 5);
    fed.pop_back();
    EXPECT_EQ(model.log->rows[p].history, concat(prompts[p], fed)) << "prompt " << p;
  }
  EXPECT_EQ(model.log->rows_at_logits.size(), steps);
}

TEST(GenerateGreedy, EncoderDecoderPenalisesDecoderTokensOnly) {
  // Context for the repetition penalty: decoder start (4) + generated, not the prompt.
  ToyModel model(7, hashed_logits(7, /*use_prompt=*/true), /*decoder_start=*/4);
  const std::vector<Tokens> prompts = {{1, 2, 3}, {3, 2, 1}};
  GenerationConfig config;
  config.max_new_tokens = 8;
  config.repetition_penalty = 1.7;
  auto results = generate(model, prompts, config);
  for (size_t p = 0; p < prompts.size(); ++p) {
    Row row{prompts[p], {4}};
    Tokens expected;
    for (int s = 0; s < 8; ++s) {
      std::vector<float> l = model.logits_for(row);
      for (size_t v = 0; v < l.size(); ++v) {
        if (std::count(row.history.begin(), row.history.end(), int64_t(v))) {
          l[v] = l[v] < 0 ? l[v] * 1.7f : l[v] / 1.7f;
        }
      }
      const int64_t best = int64_t(std::max_element(l.begin(), l.end()) - l.begin());
      expected.push_back(best);
      row.history.push_back(best);
    }
    EXPECT_EQ(results[p][0].tokens, expected) << "prompt " << p;
  }
  EXPECT_NE(results[0][0].tokens, results[1][0].tokens);  // the encoder input matters
}

TEST(GenerateConfig, ErrorsNameTheField) {
  ToyModel model(7, hashed_logits(7));
  auto expect_error = [&](const std::string& field, std::function<void(GenerationConfig&)> change,
                          std::vector<Tokens> prompts = {{1, 2}}) {
    GenerationConfig config;
    config.max_new_tokens = 2;
    change(config);
    try {
      generate(model, prompts, config);
      ADD_FAILURE() << "no error for " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_error("num_beams", [](auto& c) { c.num_beams = 0; });
  expect_error("num_return_sequences", [](auto& c) {
    c.num_beams = 2;
    c.num_return_sequences = 3;
  });
  expect_error("num_return_sequences", [](auto& c) { c.num_return_sequences = 2; });  // greedy
  expect_error("do_sample", [](auto& c) {
    c.do_sample = true;
    c.num_beams = 2;
  });
  expect_error("top_p", [](auto& c) {
    c.do_sample = true;
    c.top_p = 0;
  });
  expect_error("top_p", [](auto& c) {
    c.do_sample = true;
    c.top_p = 1.5;
  });
  expect_error("temperature", [](auto& c) {
    c.do_sample = true;
    c.temperature = 0;
  });
  expect_error("top_k", [](auto& c) {
    c.do_sample = true;
    c.top_k = -1;
  });
  expect_error("max_new_tokens", [](auto& c) { c.max_new_tokens = 0; });
  expect_error("repetition_penalty", [](auto& c) { c.repetition_penalty = 0; });
  expect_error("no_repeat_ngram_size", [](auto& c) { c.no_repeat_ngram_size = -1; });
  expect_error("eos_token_ids", [](auto& c) { c.eos_token_ids = {7}; });
  expect_error("pad_token_id", [](auto& c) { c.pad_token_id = -1; });
  expect_error("prompt 1 is empty", [](auto&) {}, {{1}, {}});
  expect_error("prompt 0, token 1 is 9", [](auto&) {}, {{1, 9}});
  GenerationConfig beam_sampling;
  beam_sampling.do_sample = true;
  beam_sampling.num_beams = 2;
  EXPECT_THROW(generate(model, {{1}}, beam_sampling), Unsupported);
  GenerationConfig bad_beams;
  bad_beams.num_beams = 0;
  EXPECT_THROW(generate(model, {{1}}, bad_beams), InvalidArgument);
}

}  // namespace
}  // namespace libai::models::generation
