// Text generation over any GenerativeModel (session.h): greedy search, sampling
// (temperature, top-k, top-p, seeded), beam search (num_beams, length_penalty,
// early_stopping, num_return_sequences), with repetition_penalty, no_repeat_ngram_size,
// min/max new tokens and eos/pad handling. The semantics follow Hugging Face transformers'
// `generate`, so greedy and beam token ids match it exactly.
//
//   generation::GenerationConfig config;
//   config.max_new_tokens = 32;
//   config.num_beams = 4;
//   config.eos_token_ids = {50256};
//   auto results = generation::generate(model, {{464, 2068}}, config);
//   results[0][0].tokens;   // the new tokens of prompt 0's best sequence (eos included)
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "models/generation/session.h"

namespace libai::models::generation {

struct GenerationConfig {
  int64_t max_new_tokens = 20;
  int64_t min_new_tokens = 0;  // eos is suppressed before this many new tokens
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 50;  // 0 = off (HF's default is 50)
  double top_p = 1.0;  // 1 = off
  uint64_t seed = 0;
  int64_t num_beams = 1;
  double length_penalty = 1.0;  // beam scores are divided by new_tokens^length_penalty
  // Beam search: a prompt is done once num_beams hypotheses are finished and its best running
  // beam, scored at the current length, cannot beat the worst; with early_stopping, as soon
  // as num_beams hypotheses are finished.
  bool early_stopping = false;
  int64_t num_return_sequences = 1;  // <= num_beams; sampling: independent samples per prompt
  double repetition_penalty = 1.0;   // 1 = off
  int64_t no_repeat_ngram_size = 0;  // 0 = off
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
};

struct GeneratedSequence {
  std::vector<int64_t> tokens;  // new tokens only (the eos that ended it included)
  // Greedy and sampling: the sum over its tokens of log_softmax(processed scores), as
  // transformers' compute_transition_scores(normalize_logits=True) gives. Beam search:
  // transformers' sequences_scores, the sum of the processed log-probabilities divided by
  // tokens.size()^length_penalty.
  double score = 0.0;
};

// One list per prompt, of num_return_sequences sequences, best first. Throws
// InvalidArgument for an inconsistent config (naming the field), e.g. num_return_sequences
// greater than num_beams, and Unsupported for beam sampling (do_sample with num_beams > 1).
std::vector<std::vector<GeneratedSequence>> generate(
    GenerativeModel& model, const std::vector<std::vector<int64_t>>& prompts,
    const GenerationConfig& config);

}  // namespace libai::models::generation
