// generate()'s beam search on the toy models (toy_generation.h): with as many beams as
// sequences it must find the brute-force best (every sequence enumerated here), and the
// session's rows must follow the beams, with batching changing nothing.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "models/generation/generate.h"
#include "toy_generation.h"

namespace libai::models::generation {
namespace {

using namespace toy;

// Every complete sequence of at most `length` new tokens (ending at the first eos), with its
// score sum(log p) / new_tokens^length_penalty, best first.
std::vector<GeneratedSequence> brute_force(const ToyModel& model, const Tokens& prompt,
                                           int64_t vocab, int64_t length, const Tokens& eos,
                                           double length_penalty) {
  std::map<Tokens, double> complete;
  int64_t total = 1;
  for (int64_t i = 0; i < length; ++i) total *= vocab;
  for (int64_t code = 0; code < total; ++code) {
    Row row{prompt, prompt};
    Tokens tokens;
    double sum = 0;
    for (int64_t i = 0, c = code; i < length; ++i, c /= vocab) {
      const int64_t token = c % vocab;
      sum += log_prob(model.logits_for(row), token);
      tokens.push_back(token);
      row.history.push_back(token);
      if (std::count(eos.begin(), eos.end(), token)) break;
    }
    complete[tokens] = sum / std::pow(double(tokens.size()), length_penalty);
  }
  std::vector<GeneratedSequence> out;
  for (const auto& [tokens, score] : complete) out.push_back({tokens, score});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
  return out;
}

void expect_top_sequences(const std::vector<GeneratedSequence>& got,
                          const std::vector<GeneratedSequence>& expected) {
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << "rank " << i;
    EXPECT_NEAR(got[i].score, expected[i].score, 1e-4) << "rank " << i;
  }
}

TEST(GenerateBeam, ExhaustiveBeamsFindTheBruteForceBest) {
  // num_beams = vocab^steps: nothing is ever pruned, so beam search is exact.
  ToyModel model(3, hashed_logits(3));
  GenerationConfig config;
  config.max_new_tokens = 3;
  config.num_beams = 27;
  config.length_penalty = 0;
  config.num_return_sequences = 6;
  for (const Tokens& prompt : {Tokens{1}, Tokens{2, 0, 2}}) {
    auto got = generate(model, {prompt}, config);
    ASSERT_EQ(got[0].size(), 6u);
    expect_top_sequences(got[0], brute_force(model, prompt, 3, 3, {}, 0.0));
  }
}

TEST(GenerateBeam, ExhaustiveBeamsWithEosAndLengthPenalty) {
  ToyModel model(3, hashed_logits(3));
  GenerationConfig config;
  config.max_new_tokens = 3;
  config.num_beams = 27;
  config.eos_token_ids = {0};
  config.num_return_sequences = 6;
  for (double length_penalty : {0.0, 1.0, 2.5, -1.0}) {
    SCOPED_TRACE("length_penalty " + std::to_string(length_penalty));
    config.length_penalty = length_penalty;
    auto got = generate(model, {{1, 2}}, config);
    expect_top_sequences(got[0], brute_force(model, {1, 2}, 3, 3, {0}, length_penalty));
  }
}

TEST(GenerateBeam, SessionRowsFollowTheBeamsAndBatchingChangesNothing) {
  // Prompt {0, 3} stops improving early (see beam2_heuristic_stop below) while the others go
  // on: its hypotheses must stay as they were when it ran alone.
  ToyModel model(7, hashed_logits(7));
  const std::vector<Tokens> prompts = {{3, 1, 4}, {2, 6}, {0, 1}, {0, 3}};
  for (auto [num_beams, early_stopping] : {std::pair{3, false}, {2, false}, {2, true}}) {
    SCOPED_TRACE("num_beams " + std::to_string(num_beams) + " early " +
                 std::to_string(early_stopping));
    GenerationConfig config;
    config.max_new_tokens = 8;
    config.num_beams = num_beams;
    config.num_return_sequences = num_beams;
    config.early_stopping = early_stopping;
    config.eos_token_ids = {0, 6};
    auto batched = generate(model, prompts, config);
    const auto snapshots = model.log->rows_at_logits;
    if (early_stopping) {  // the search ends at the step that finished the last hypothesis
      size_t longest = 0;
      for (const auto& sequences : batched) {
        for (const auto& h : sequences) longest = std::max(longest, h.tokens.size());
      }
      EXPECT_EQ(snapshots.size(), longest);
    }
    for (size_t p = 0; p < prompts.size(); ++p) {
      // Each hypothesis was scored from a session row holding prompt + its tokens but the last.
      for (const GeneratedSequence& h : batched[p]) {
        ASSERT_LE(h.tokens.size(), snapshots.size());
        const Tokens before_last = concat(prompts[p], Tokens(h.tokens.begin(), h.tokens.end() - 1));
        const auto& rows = snapshots[h.tokens.size() - 1];
        EXPECT_TRUE(std::any_of(rows.begin(), rows.end(),
                                [&](const Row& r) { return r.history == before_last; }))
            << "prompt " << p;
      }
      auto alone = generate(model, {prompts[p]}, config);
      for (int i = 0; i < num_beams; ++i) {
        EXPECT_EQ(batched[p][i].tokens, alone[0][i].tokens) << "prompt " << p << " rank " << i;
        EXPECT_EQ(batched[p][i].score, alone[0][i].score);
      }
    }
  }
}

}  // namespace
}  // namespace libai::models::generation
