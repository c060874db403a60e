// Hugging Face's logits processors and token choice, one row of scores at a time: the pieces
// that generate.cc chains in transformers' order (repetition penalty, no-repeat n-grams,
// min-new-tokens eos suppression; then, when sampling, temperature, top-k, top-p).
// Scores are f32 like transformers' (it casts logits to float32 before processing); removed
// tokens get -inf.
//
//   std::vector<float> row = ...;                        // [vocab]
//   apply_repetition_penalty(row, context, 1.2);         // context: the row's token history
//   ban_repeated_ngrams(row, context, 3);
//   keep_top_k(row, 50);
//   int64_t token = sample_index(row, uniform(key, step));
#pragma once

#include <cstdint>
#include <span>

namespace libai::models::generation {

// Every token present in `context` (once, however often it occurs): a negative score is
// multiplied by `penalty`, any other divided by it.
void apply_repetition_penalty(std::span<float> scores, std::span<const int64_t> context,
                              double penalty);
// Bans each token that would complete an n-gram (n = ngram_size) already in `context`.
void ban_repeated_ngrams(std::span<float> scores, std::span<const int64_t> context,
                         int64_t ngram_size);
// Sets the given tokens to -inf (ids outside the row are ignored).
void suppress_tokens(std::span<float> scores, std::span<const int64_t> tokens);
void apply_temperature(std::span<float> scores, double temperature);
// Removes every score below the k-th largest (ties with it are kept); k >= vocab keeps all.
void keep_top_k(std::span<float> scores, int64_t k);
// Removes the least likely tokens whose cumulative probability (from the least likely up)
// is <= 1 - top_p, always keeping the most likely one.
void keep_top_p(std::span<float> scores, double top_p);

// In place: scores - logsumexp(scores). A row of -inf stays -inf.
void log_softmax_in_place(std::span<float> scores);
// log_softmax(scores)[index], in double.
double log_probability(std::span<const float> scores, int64_t index);
// The first index of the largest score (torch.argmax).
int64_t argmax(std::span<const float> scores);
// The token drawn from softmax(scores) by the uniform number u in [0, 1): the first index
// whose cumulative probability exceeds u. Tokens at -inf are never drawn.
int64_t sample_index(std::span<const float> scores, double u);

}  // namespace libai::models::generation
