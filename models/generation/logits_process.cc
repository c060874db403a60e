#include "models/generation/logits_process.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "runtime/error.h"

namespace libai::models::generation {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

int64_t size_of(std::span<const float> scores) { return int64_t(scores.size()); }

}  // namespace

void apply_repetition_penalty(std::span<float> scores, std::span<const int64_t> context,
                              double penalty) {
  const float factor = float(penalty);
  std::vector<char> seen(scores.size(), 0);
  for (int64_t token : context) {
    if (token < 0 || token >= size_of(scores) || seen[size_t(token)]) continue;
    seen[size_t(token)] = 1;
    float& s = scores[size_t(token)];
    s = s < 0 ? s * factor : s / factor;
  }
}

void ban_repeated_ngrams(std::span<float> scores, std::span<const int64_t> context,
                         int64_t ngram_size) {
  const int64_t length = int64_t(context.size());
  if (ngram_size <= 0 || length < ngram_size) return;
  // The last n-1 tokens are the prefix of the n-gram the next token would complete.
  const auto prefix = context.subspan(size_t(length - ngram_size + 1));
  for (int64_t start = 0; start + ngram_size <= length; ++start) {
    const auto window = context.subspan(size_t(start), size_t(ngram_size));
    if (!std::equal(prefix.begin(), prefix.end(), window.begin())) continue;
    const int64_t banned = window.back();
    if (banned >= 0 && banned < size_of(scores)) scores[size_t(banned)] = kMinusInf;
  }
}

void suppress_tokens(std::span<float> scores, std::span<const int64_t> tokens) {
  for (int64_t token : tokens) {
    if (token >= 0 && token < size_of(scores)) scores[size_t(token)] = kMinusInf;
  }
}

void apply_temperature(std::span<float> scores, double temperature) {
  const float t = float(temperature);
  for (float& s : scores) s /= t;
}

void keep_top_k(std::span<float> scores, int64_t k) {
  if (k <= 0 || k >= size_of(scores)) return;
  std::vector<float> sorted(scores.begin(), scores.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float threshold = sorted[size_t(k - 1)];
  for (float& s : scores) {
    if (s < threshold) s = kMinusInf;
  }
}

void keep_top_p(std::span<float> scores, double top_p) {
  const size_t n = scores.size();
  if (n == 0 || top_p >= 1.0) return;
  // Ascending order, as transformers sorts; ties keep index order.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  const float top = scores[order.back()];
  double total = 0;
  for (float s : scores) total += std::exp(double(s) - double(top));
  // Probabilities in f32 and their running sum rounded to f32 at each step, like torch's
  // softmax followed by cumsum (which accumulates in double on the CPU).
  const float cut = float(1.0 - top_p);
  double cumulative = 0;
  std::vector<size_t> removed;
  for (size_t i = 0; i + 1 < n; ++i) {
    const size_t token = order[i];
    cumulative += double(float(std::exp(double(scores[token]) - double(top)) / total));
    if (float(cumulative) <= cut) removed.push_back(token);
  }
  for (size_t token : removed) scores[token] = kMinusInf;
}

void log_softmax_in_place(std::span<float> scores) {
  if (scores.empty()) return;
  const float top = *std::max_element(scores.begin(), scores.end());
  if (std::isinf(top) && top < 0) return;
  double sum = 0;
  for (float s : scores) sum += std::exp(double(s - top));
  const float log_sum = float(std::log(sum));
  for (float& s : scores) s = (s - top) - log_sum;
}

double log_probability(std::span<const float> scores, int64_t index) {
  const float top = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (float s : scores) sum += std::exp(double(s) - double(top));
  return double(scores[size_t(index)]) - double(top) - std::log(sum);
}

int64_t argmax(std::span<const float> scores) {
  return int64_t(std::max_element(scores.begin(), scores.end()) - scores.begin());
}

int64_t sample_index(std::span<const float> scores, double u) {
  const float top = *std::max_element(scores.begin(), scores.end());
  LIBAI_CHECK(top > -std::numeric_limits<float>::infinity(),
              "generate: sampling found every token removed (all scores are -inf)");
  std::vector<double> weights(scores.size());
  double total = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    weights[i] = std::exp(double(scores[i]) - double(top));
    total += weights[i];
  }
  const double target = u * total;
  double cumulative = 0;
  int64_t last_possible = argmax(scores);
  for (size_t i = 0; i < scores.size(); ++i) {
    if (weights[i] <= 0) continue;
    last_possible = int64_t(i);
    cumulative += weights[i];
    if (cumulative > target) return int64_t(i);
  }
  return last_possible;  // u * total rounded up to the full sum
}

}  // namespace libai::models::generation
