// generate() against Hugging Face transformers' generate() on the same toy model
// (toy_generation.h's hashed_logits, with a Python twin in tools/make_generation_fixtures.py):
// token ids and scores of greedy and beam search, with eos, penalties and length penalties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "models/generation/generate.h"
#include "toy_generation.h"

namespace libai::models::generation {
namespace {

using namespace toy;

// Token ids and scores of transformers 5.24's generate() (greedy: the sum of its transition
// scores) for the toy of hashed_logits(7), produced by
// tools/make_generation_fixtures.py.
struct TransformersCase {
  const char* name;
  Tokens prompt;
  std::function<void(GenerationConfig&)> configure;
};

struct TransformersResult {
  const char* name;
  size_t rank;
  Tokens tokens;
  double score;
};

TEST(GenerateTransformers, TokenIdsAndScoresMatch) {
  const std::vector<TransformersCase> cases = {
      {"greedy", {3, 1, 4}, [](auto& c) { c.max_new_tokens = 8; }},
      {"greedy_eos",
       {2, 6},
       [](auto& c) {
         c.max_new_tokens = 10;
         c.eos_token_ids = {0};
       }},
      {"greedy_penalties",
       {5, 5, 1},
       [](auto& c) {
         c.max_new_tokens = 10;
         c.repetition_penalty = 1.3;
         c.no_repeat_ngram_size = 2;
       }},
      {"greedy_min_new",
       {2, 6},
       [](auto& c) {
         c.max_new_tokens = 10;
         c.eos_token_ids = {0};
         c.min_new_tokens = 4;
       }},
      {"beam3",
       {3, 1, 4},
       [](auto& c) {
         c.max_new_tokens = 6;
         c.num_beams = 3;
         c.num_return_sequences = 3;
       }},
      {"beam4_eos",
       {2, 6},
       [](auto& c) {
         c.max_new_tokens = 8;
         c.num_beams = 4;
         c.eos_token_ids = {0};
         c.num_return_sequences = 4;
       }},
      {"beam3_eos_lp2",
       {1},
       [](auto& c) {
         c.max_new_tokens = 8;
         c.num_beams = 3;
         c.eos_token_ids = {0, 3};
         c.length_penalty = 2.0;
         c.num_return_sequences = 3;
       }},
      {"beam3_eos_lpneg",
       {6, 6},
       [](auto& c) {
         c.max_new_tokens = 8;
         c.num_beams = 3;
         c.eos_token_ids = {0};
         c.length_penalty = -1.0;
         c.num_return_sequences = 3;
       }},
      {"beam4_penalties",
       {5, 5, 1},
       [](auto& c) {
         c.max_new_tokens = 8;
         c.num_beams = 4;
         c.eos_token_ids = {0};
         c.repetition_penalty = 1.5;
         c.no_repeat_ngram_size = 2;
         c.min_new_tokens = 3;
         c.num_return_sequences = 2;
       }},
      {"beam3_early_false",
       {0, 1},
       [](auto& c) {
         c.max_new_tokens = 7;
         c.num_beams = 3;
         c.eos_token_ids = {0, 6};
         c.num_return_sequences = 3;
       }},
      {"beam3_early_true",
       {0, 1},
       [](auto& c) {
         c.max_new_tokens = 7;
         c.num_beams = 3;
         c.eos_token_ids = {0, 6};
         c.early_stopping = true;
         c.num_return_sequences = 3;
       }},
      {"beam2_heuristic_stop",
       {0, 3},
       [](auto& c) {
         c.max_new_tokens = 7;
         c.num_beams = 2;
         c.eos_token_ids = {0, 6};
         c.num_return_sequences = 2;
       }},
  };
  const std::vector<TransformersResult> expected = {
      {"greedy", 0, {2, 2, 0, 1, 3, 0, 3, 5}, -7.63614559173584},
      {"greedy_eos", 0, {2, 1, 0}, -1.672813057899475},
      {"greedy_penalties", 0, {2, 1, 4, 1, 3, 0, 3, 6, 1, 0}, -6.601726531982422},
      {"greedy_min_new", 0, {2, 1, 5, 4, 6, 2, 1, 2, 4, 1}, -6.078490257263184},
      {"beam3", 0, {1, 5, 4, 6, 2, 1}, -0.7087141871452332},
      {"beam3", 1, {1, 5, 4, 6, 2, 3}, -0.7607433199882507},
      {"beam3", 2, {2, 1, 4, 1, 5, 1}, -0.7653444409370422},
      {"beam4_eos", 0, {2, 1, 0}, -0.5576043725013733},
      {"beam4_eos", 1, {5, 6, 6, 6, 3, 0}, -0.7329254746437073},
      {"beam4_eos", 2, {1, 2, 1, 4, 1, 5, 1, 4}, -0.7458421587944031},
      {"beam4_eos", 3, {5, 6, 6, 5, 5, 3, 1, 1}, -0.7924756407737732},
      {"beam3_eos_lp2", 0, {5, 6, 2, 1, 4, 1, 5, 1}, -0.059453777968883514},
      {"beam3_eos_lp2", 1, {5, 6, 2, 1, 4, 1, 3}, -0.0653052031993866},
      {"beam3_eos_lp2", 2, {5, 6, 2, 1, 4, 1, 5, 6}, -0.06785773485898972},
      {"beam3_eos_lpneg", 0, {2, 1, 0}, -6.0929388999938965},
      {"beam3_eos_lpneg", 1, {4, 4, 1, 0}, -12.911642074584961},
      {"beam3_eos_lpneg", 2, {4, 4, 6, 2, 2, 0}, -28.562549591064453},
      {"beam4_penalties", 0, {2, 1, 4, 1, 3, 0}, -0.7910352349281311},
      {"beam4_penalties", 1, {2, 1, 4, 1, 3, 4, 0}, -0.9240766763687134},
      {"beam3_early_false", 0, {5, 2, 4, 5, 2, 1, 4}, -0.627974808216095},
      {"beam3_early_false", 1, {5, 2, 4, 5, 2, 5, 3}, -0.6847624778747559},
      {"beam3_early_false", 2, {5, 2, 4, 5, 2, 1, 3}, -0.8109927177429199},
      {"beam3_early_true", 0, {1, 5, 6}, -0.8980452418327332},
      {"beam3_early_true", 1, {5, 2, 6}, -0.8986594080924988},
      {"beam3_early_true", 2, {5, 6}, -1.0681827068328857},
      {"beam2_heuristic_stop", 0, {2, 3, 0}, -0.7370269298553467},
      {"beam2_heuristic_stop", 1, {0}, -0.8021722435951233},
  };
  ToyModel model(7, hashed_logits(7));
  size_t checked = 0;
  for (const TransformersCase& c : cases) {
    GenerationConfig config;
    config.pad_token_id = 0;
    c.configure(config);
    const auto got = generate(model, {c.prompt}, config);
    ASSERT_EQ(got[0].size(), size_t(config.num_return_sequences)) << c.name;
    for (const TransformersResult& e : expected) {
      if (std::string(e.name) != c.name) continue;
      SCOPED_TRACE(std::string(c.name) + " rank " + std::to_string(e.rank));
      EXPECT_EQ(got[0][e.rank].tokens, e.tokens);
      EXPECT_NEAR(got[0][e.rank].score, e.score, 1e-5 * std::max(1.0, std::abs(e.score)));
      ++checked;
    }
  }
  EXPECT_EQ(checked, expected.size());
}

}  // namespace
}  // namespace libai::models::generation
