#include "models/generation/generate.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "models/generation/logits_process.h"
#include "runtime/error.h"
#include "runtime/rng.h"

namespace libai::models::generation {
namespace {

using Prompts = std::vector<std::vector<int64_t>>;
using Results = std::vector<std::vector<GeneratedSequence>>;

// transformers' "minus infinity but finite" that marks dead beams and hypotheses.
constexpr float kDead = -1.0e9f;

bool in_vocab(int64_t token, int64_t vocab) { return token >= 0 && token < vocab; }

void validate(const GenerativeModel& model, const Prompts& prompts, const GenerationConfig& c) {
  const int64_t vocab = model.vocab_size();
  LIBAI_CHECK(vocab > 0, "generate: the model's vocab_size() is ", vocab);
  LIBAI_CHECK(c.max_new_tokens >= 1, "GenerationConfig.max_new_tokens must be >= 1, got ",
              c.max_new_tokens);
  LIBAI_CHECK(c.min_new_tokens >= 0, "GenerationConfig.min_new_tokens must be >= 0, got ",
              c.min_new_tokens);
  LIBAI_CHECK(c.num_beams >= 1, "GenerationConfig.num_beams must be >= 1, got ", c.num_beams);
  LIBAI_CHECK(c.num_return_sequences >= 1,
              "GenerationConfig.num_return_sequences must be >= 1, got ", c.num_return_sequences);
  LIBAI_CHECK_KIND(Unsupported, !(c.do_sample && c.num_beams > 1),
                   "GenerationConfig.do_sample with num_beams = ", c.num_beams,
                   " (beam sampling) is unsupported; use num_beams = 1 or do_sample = false");
  LIBAI_CHECK(c.do_sample || c.num_return_sequences <= c.num_beams,
              "GenerationConfig.num_return_sequences (", c.num_return_sequences,
              ") must be <= num_beams (", c.num_beams, ")");
  if (c.do_sample) {  // as in transformers, the warpers are only checked when sampling
    LIBAI_CHECK(c.temperature > 0 && std::isfinite(c.temperature),
                "GenerationConfig.temperature must be > 0 when do_sample, got ", c.temperature,
                " (for greedy search set do_sample = false)");
    LIBAI_CHECK(c.top_k >= 0, "GenerationConfig.top_k must be >= 0 (0 = off), got ", c.top_k);
    LIBAI_CHECK(c.top_p > 0 && c.top_p <= 1, "GenerationConfig.top_p must be in (0, 1], got ",
                c.top_p);
  }
  LIBAI_CHECK(std::isfinite(c.length_penalty),
              "GenerationConfig.length_penalty must be finite, got ", c.length_penalty);
  LIBAI_CHECK(c.repetition_penalty > 0 && std::isfinite(c.repetition_penalty),
              "GenerationConfig.repetition_penalty must be > 0 (1 = off), got ",
              c.repetition_penalty);
  LIBAI_CHECK(c.no_repeat_ngram_size >= 0,
              "GenerationConfig.no_repeat_ngram_size must be >= 0 (0 = off), got ",
              c.no_repeat_ngram_size);
  for (int64_t eos : c.eos_token_ids) {
    LIBAI_CHECK(in_vocab(eos, vocab), "GenerationConfig.eos_token_ids: ", eos,
                " is outside the vocabulary [0, ", vocab, ")");
  }
  LIBAI_CHECK(!c.pad_token_id || in_vocab(*c.pad_token_id, vocab),
              "GenerationConfig.pad_token_id: ", c.pad_token_id.value_or(0),
              " is outside the vocabulary [0, ", vocab, ")");
  if (model.is_encoder_decoder()) {
    LIBAI_CHECK(in_vocab(model.decoder_start_token_id(), vocab),
                "generate: the encoder-decoder model's decoder_start_token_id ",
                model.decoder_start_token_id(), " is outside the vocabulary [0, ", vocab, ")");
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    LIBAI_CHECK(!prompts[p].empty(), "generate: prompt ", p, " is empty");
    for (size_t i = 0; i < prompts[p].size(); ++i) {
      LIBAI_CHECK(in_vocab(prompts[p][i], vocab), "generate: prompt ", p, ", token ", i, " is ",
                  prompts[p][i], ", outside the vocabulary [0, ", vocab, ")");
    }
  }
  if (c.num_beams > 1) {
    const int64_t candidates =
        std::max<int64_t>(2, 1 + int64_t(c.eos_token_ids.size())) * c.num_beams;
    LIBAI_CHECK(candidates <= c.num_beams * vocab, "generate: beam search keeps ", candidates,
                " candidates per step, more than num_beams * vocab = ", c.num_beams * vocab);
  }
}

// The history that repetition_penalty and no_repeat_ngram_size look at (transformers'
// input_ids): decoder-only, the prompt; encoder-decoder, the decoder's start token.
std::vector<int64_t> initial_context(const GenerativeModel& model,
                                     const std::vector<int64_t>& prompt) {
  if (model.is_encoder_decoder()) return {model.decoder_start_token_id()};
  return prompt;
}

bool is_eos(const GenerationConfig& c, int64_t token) {
  return std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), token) != c.eos_token_ids.end();
}

// [rows * vocab] f32 next-token logits.
std::vector<float> read_logits(DecodeSession& session, int64_t rows, int64_t vocab) {
  Tensor logits = session.logits();
  LIBAI_CHECK(logits.dim() == 2 && logits.size(0) == rows && logits.size(1) == vocab &&
                  logits.dtype() == DType::f32,
              "generate: the session's logits() must be f32 [", rows, ", ", vocab, "], got ",
              dtype_name(logits.dtype()), " ", shape_str(logits.shape()));
  return logits.to_vector<float>();
}

// The processors that every search applies, in transformers' order.
void process(std::span<float> scores, const std::vector<int64_t>& context, int64_t generated,
             const GenerationConfig& c) {
  if (c.repetition_penalty != 1.0) apply_repetition_penalty(scores, context, c.repetition_penalty);
  if (c.no_repeat_ngram_size > 0) ban_repeated_ngrams(scores, context, c.no_repeat_ngram_size);
  if (generated < c.min_new_tokens) suppress_tokens(scores, c.eos_token_ids);
}

// Sampling's warpers, after process().
void warp(std::span<float> scores, const GenerationConfig& c) {
  if (c.temperature != 1.0) apply_temperature(scores, c.temperature);
  if (c.top_k != 0) keep_top_k(scores, c.top_k);
  if (c.top_p < 1.0) keep_top_p(scores, c.top_p);
}

// Greedy search and sampling: one row per (prompt, returned sequence); a row that produced
// an eos is finished and is fed the pad token until every row is finished.
Results search_rows(GenerativeModel& model, const Prompts& prompts, const GenerationConfig& c) {
  const int64_t vocab = model.vocab_size();
  const int64_t per_prompt = c.num_return_sequences;
  const int64_t rows = int64_t(prompts.size()) * per_prompt;
  const int64_t pad = c.pad_token_id.value_or(c.eos_token_ids.empty() ? 0 : c.eos_token_ids[0]);
  const RngKey sample_key{c.seed, stream_id("generation.sample")};

  auto session = model.start(prompts);
  if (per_prompt > 1) {
    std::vector<int64_t> expand;
    for (int64_t r = 0; r < rows; ++r) expand.push_back(r / per_prompt);
    session->select_rows(expand);
  }
  std::vector<std::vector<int64_t>> context(static_cast<size_t>(rows));
  std::vector<RngKey> keys(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    context[r] = initial_context(model, prompts[size_t(r / per_prompt)]);
    keys[r] = derive(derive(sample_key, uint64_t(r / per_prompt)), uint64_t(r % per_prompt));
  }
  std::vector<GeneratedSequence> out(static_cast<size_t>(rows));
  std::vector<char> finished(size_t(rows), 0);
  for (int64_t step = 0; step < c.max_new_tokens; ++step) {
    std::vector<float> logits = read_logits(*session, rows, vocab);
    std::vector<int64_t> next(size_t(rows), pad);
    for (int64_t r = 0; r < rows; ++r) {
      if (finished[r]) continue;
      std::span<float> scores(logits.data() + r * vocab, size_t(vocab));
      process(scores, context[r], step, c);
      int64_t token;
      if (c.do_sample) {
        warp(scores, c);
        token = sample_index(scores, uniform(keys[r], uint64_t(step)));
      } else {
        token = argmax(scores);
      }
      out[r].score += log_probability(scores, token);
      out[r].tokens.push_back(token);
      context[r].push_back(token);
      next[r] = token;
      finished[r] = is_eos(c, token);
    }
    const bool all_finished =
        std::all_of(finished.begin(), finished.end(), [](char f) { return f; });
    if (all_finished || step + 1 == c.max_new_tokens) break;
    session->append(next);
  }
  Results results(prompts.size());
  for (int64_t r = 0; r < rows; ++r) results[size_t(r / per_prompt)].push_back(std::move(out[r]));
  for (auto& sequences : results) {
    std::stable_sort(sequences.begin(), sequences.end(),
                     [](const auto& a, const auto& b) { return a.score > b.score; });
  }
  return results;
}

// Note [Beam search as in transformers]
// Per prompt, num_beams running beams and num_beams finished hypotheses (best first). Each
// step: log_softmax of the logits, the processors on those log-probabilities (not
// renormalised), plus the beam's running score (f32); the top K = max(2, 1 + #eos) *
// num_beams candidates over all beams (the first step sees only beam 0: the others start at
// -1e9). A candidate "stops" when its token is an eos or the step reaches max_new_tokens.
// The running beams are the best num_beams candidates once stopping ones get -1e9 added. A
// stopping candidate among the first num_beams becomes a hypothesis scored
// sum_logprobs / new_tokens^length_penalty (new tokens counting the eos, not the prompt),
// kept if it ranks among the num_beams best; nothing is added once all num_beams are
// finished with early_stopping, nor once no running beam can improve: the best running
// score / new_tokens^length_penalty is not above the worst hypothesis. The search stops when
// no prompt can improve, when early_stopping and all hypotheses of all prompts are finished,
// or when every candidate stops. Ties rank the lower index first (torch.topk leaves it open).
struct Beam {
  std::vector<int64_t> context;
  std::vector<int64_t> tokens;  // new tokens
  float score = 0;              // sum of processed log-probabilities
};

struct Hypothesis {
  std::vector<int64_t> tokens;
  float score = kDead;
  bool finished = false;
};

struct Candidate {
  int64_t beam;  // within the prompt's beams
  int64_t token;
  float score;
  bool stops;
};

struct BeamGroup {
  std::vector<Beam> beams;
  std::vector<Hypothesis> hypotheses;
  bool may_improve = true;
};

// Indices of the n largest values, largest first, ties by lower index.
std::vector<int64_t> top_indices(const std::vector<float>& values, int64_t n) {
  std::vector<int64_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int64_t a, int64_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  order.resize(size_t(n));
  return order;
}

// The best `keep` continuations of a prompt's beams; `logits` is [num_beams, vocab].
std::vector<Candidate> top_candidates(const BeamGroup& group, std::span<float> logits,
                                      int64_t vocab, int64_t step, int64_t keep,
                                      const GenerationConfig& c) {
  const int64_t num_beams = int64_t(group.beams.size());
  std::vector<float> totals(size_t(num_beams * vocab));  // [num_beams, vocab]
  for (int64_t b = 0; b < num_beams; ++b) {
    std::span<float> scores = logits.subspan(size_t(b * vocab), size_t(vocab));
    log_softmax_in_place(scores);
    process(scores, group.beams[b].context, step, c);
    for (int64_t v = 0; v < vocab; ++v) totals[b * vocab + v] = scores[v] + group.beams[b].score;
  }
  std::vector<Candidate> candidates;
  for (int64_t index : top_indices(totals, keep)) {
    const int64_t token = index % vocab;
    const bool stops = is_eos(c, token) || step + 1 == c.max_new_tokens;
    candidates.push_back({index / vocab, token, totals[index], stops});
  }
  return candidates;
}

// The next running beams: the best candidates once the stopping ones are marked dead.
std::vector<Beam> next_beams(const BeamGroup& group, const std::vector<Candidate>& candidates,
                             std::vector<int64_t>& sources) {
  std::vector<float> scores;
  for (const Candidate& cand : candidates)
    scores.push_back(cand.score + (cand.stops ? kDead : 0.f));
  std::vector<Beam> beams;
  for (int64_t k : top_indices(scores, int64_t(group.beams.size()))) {
    const Candidate& cand = candidates[k];
    Beam beam = group.beams[cand.beam];
    beam.context.push_back(cand.token);
    beam.tokens.push_back(cand.token);
    beam.score = scores[k];
    sources.push_back(cand.beam);
    beams.push_back(std::move(beam));
  }
  return beams;
}

// Merges the stopping candidates among the first num_beams into the hypotheses.
void add_hypotheses(BeamGroup& group, const std::vector<Candidate>& candidates,
                    float length_divisor, bool early_stopping) {
  const int64_t num_beams = int64_t(group.beams.size());
  const bool full = early_stopping && std::all_of(group.hypotheses.begin(), group.hypotheses.end(),
                                                  [](const Hypothesis& h) { return h.finished; });
  std::vector<Hypothesis> merged = group.hypotheses;
  for (size_t k = 0; k < candidates.size(); ++k) {
    const Candidate& cand = candidates[k];
    const bool added = cand.stops && int64_t(k) < num_beams;
    float score = cand.score / length_divisor;
    if (full) score += kDead;
    if (!group.may_improve) score += kDead;
    if (!added) score += kDead;
    std::vector<int64_t> tokens = group.beams[cand.beam].tokens;
    tokens.push_back(cand.token);
    merged.push_back({std::move(tokens), score, added});
  }
  std::vector<float> scores;
  for (const Hypothesis& h : merged) scores.push_back(h.score);
  group.hypotheses.clear();
  for (int64_t k : top_indices(scores, num_beams)) group.hypotheses.push_back(std::move(merged[k]));
}

// Can the best running beam, scored at the current length, still beat a hypothesis?
bool may_improve(const BeamGroup& group, float length_divisor) {
  const float best_running = group.beams[0].score / length_divisor;
  float worst = group.hypotheses[0].score;
  for (const Hypothesis& h : group.hypotheses) worst = std::min(worst, h.score);
  return std::any_of(group.hypotheses.begin(), group.hypotheses.end(), [&](const Hypothesis& h) {
    return best_running > (h.finished ? worst : kDead);
  });
}

bool all_finished(const BeamGroup& group) {
  return std::all_of(group.hypotheses.begin(), group.hypotheses.end(),
                     [](const Hypothesis& h) { return h.finished; });
}

Results search_beams(GenerativeModel& model, const Prompts& prompts, const GenerationConfig& c) {
  const int64_t vocab = model.vocab_size();
  const int64_t num_beams = c.num_beams;
  const int64_t rows = int64_t(prompts.size()) * num_beams;
  const int64_t keep = std::max<int64_t>(2, 1 + int64_t(c.eos_token_ids.size())) * num_beams;

  auto session = model.start(prompts);
  std::vector<int64_t> expand;
  for (int64_t r = 0; r < rows; ++r) expand.push_back(r / num_beams);
  session->select_rows(expand);
  std::vector<BeamGroup> groups(prompts.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].beams.assign(size_t(num_beams), Beam{initial_context(model, prompts[g]), {}, kDead});
    groups[g].beams[0].score = 0;
    groups[g].hypotheses.resize(size_t(num_beams));
  }
  for (int64_t step = 0; step < c.max_new_tokens; ++step) {
    std::vector<float> logits = read_logits(*session, rows, vocab);  // [rows, vocab]
    // transformers divides the f32 scores by the f64 new_tokens ** length_penalty.
    const float length_divisor = float(std::pow(double(step + 1), c.length_penalty));
    bool any_continues = false, any_may_improve = false, all_full = true;
    std::vector<int64_t> sources, next_tokens;
    for (size_t g = 0; g < groups.size(); ++g) {
      BeamGroup& group = groups[g];
      std::span<float> group_logits(logits.data() + g * num_beams * vocab,
                                    size_t(num_beams * vocab));
      const auto candidates = top_candidates(group, group_logits, vocab, step, keep, c);
      for (const Candidate& cand : candidates) any_continues = any_continues || !cand.stops;
      std::vector<int64_t> group_sources;
      std::vector<Beam> beams = next_beams(group, candidates, group_sources);
      for (size_t b = 0; b < beams.size(); ++b) {
        sources.push_back(int64_t(g) * num_beams + group_sources[b]);
        next_tokens.push_back(beams[b].tokens.back());
      }
      add_hypotheses(group, candidates, length_divisor, c.early_stopping);
      group.beams = std::move(beams);
      group.may_improve = group.may_improve && may_improve(group, length_divisor);
      any_may_improve = any_may_improve || group.may_improve;
      all_full = all_full && all_finished(group);
    }
    if (!any_may_improve || (c.early_stopping && all_full) || !any_continues) break;
    session->select_rows(sources);
    session->append(next_tokens);
  }
  Results results(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int64_t k = 0; k < c.num_return_sequences; ++k) {
      Hypothesis& h = groups[g].hypotheses[k];
      results[g].push_back({std::move(h.tokens), double(h.score)});
    }
  }
  return results;
}

}  // namespace

Results generate(GenerativeModel& model, const Prompts& prompts, const GenerationConfig& config) {
  validate(model, prompts, config);
  if (prompts.empty()) return {};
  if (config.num_beams > 1) return search_beams(model, prompts, config);
  return search_rows(model, prompts, config);
}

}  // namespace libai::models::generation
