// generate() on toy models whose next-token logits are a pure function of each row's history,
// checked against references that do not use generate.cc: step-by-step argmax, brute-force
// enumeration of all sequences, hand-computed penalties, empirical sampling frequencies, and
// configuration errors (token ids and scores against Hugging Face transformers:
// generate_transformers_test.cc; the toys: toy_generation.h).
#include "models/generation/generate.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "models/generation/logits_process.h"
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
