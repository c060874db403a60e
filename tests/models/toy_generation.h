// Toy generative models for the generate() tests: next-token logits that are a pure function
// of each row's history, the sessions they open (logged, so a test sees what generate() asked
// for), and references written without generate.cc (greedy by hand, log-softmax).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "models/generation/generate.h"

namespace libai::models::generation::toy {

using Tokens = std::vector<int64_t>;

// One row of a toy session: its prompt and the decoder history (decoder-only: prompt +
// appended tokens; encoder-decoder: decoder start + appended tokens).
struct Row {
  Tokens prompt;
  Tokens history;
};
using LogitsFn = std::function<std::vector<float>(const Row&)>;

// What the sessions of a toy model did, kept after generate() destroys them.
struct SessionLog {
  std::vector<Row> rows;
  std::vector<std::vector<Row>> rows_at_logits;  // the rows at each logits() call
};

class ToySession : public DecodeSession {
 public:
  ToySession(std::shared_ptr<SessionLog> log, LogitsFn fn, int64_t vocab)
      : log_(std::move(log)), fn_(std::move(fn)), vocab_(vocab) {}
  int64_t batch_size() const override { return int64_t(log_->rows.size()); }
  Tensor logits() override {
    log_->rows_at_logits.push_back(log_->rows);
    std::vector<float> values;
    for (const Row& row : log_->rows) {
      std::vector<float> row_logits = fn_(row);
      values.insert(values.end(), row_logits.begin(), row_logits.end());
    }
    return Tensor::from_vector(values, {batch_size(), vocab_});
  }
  void append(const Tokens& tokens) override {
    EXPECT_EQ(int64_t(tokens.size()), batch_size());
    for (size_t r = 0; r < tokens.size(); ++r) log_->rows[r].history.push_back(tokens[r]);
  }
  void select_rows(const Tokens& rows) override {
    std::vector<Row> selected;
    for (int64_t r : rows) {
      EXPECT_TRUE(r >= 0 && r < batch_size()) << "select_rows: row " << r;
      selected.push_back(log_->rows.at(size_t(r)));
    }
    log_->rows = std::move(selected);
  }

 private:
  std::shared_ptr<SessionLog> log_;
  LogitsFn fn_;
  int64_t vocab_;
};

class ToyModel : public GenerativeModel {
 public:
  ToyModel(int64_t vocab, LogitsFn fn, int64_t decoder_start = -1)
      : vocab_(vocab), fn_(std::move(fn)), decoder_start_(decoder_start) {}
  std::unique_ptr<DecodeSession> start(const std::vector<Tokens>& prompts) override {
    log = std::make_shared<SessionLog>();
    for (const Tokens& p : prompts) {
      log->rows.push_back({p, is_encoder_decoder() ? Tokens{decoder_start_} : p});
    }
    return std::make_unique<ToySession>(log, fn_, vocab_);
  }
  bool is_encoder_decoder() const override { return decoder_start_ >= 0; }
  int64_t decoder_start_token_id() const override { return decoder_start_; }
  int64_t vocab_size() const override { return vocab_; }
  std::vector<float> logits_for(const Row& row) const { return fn_(row); }

  std::shared_ptr<SessionLog> log;  // of the last session

 private:
  int64_t vocab_;
  LogitsFn fn_;
  int64_t decoder_start_;
};

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Logits in [-3, 3] hashed from the last two tokens, the history length and (encoder-decoder)
// the prompt. The Python twin in the fixture script computes the same f32 values.
inline LogitsFn hashed_logits(int64_t vocab, bool use_prompt = false) {
  return [vocab, use_prompt](const Row& row) {
    uint64_t encoder = 0;
    if (use_prompt) {
      for (int64_t t : row.prompt) encoder = mix(encoder * 131 + uint64_t(t) + 1);
    }
    const Tokens& h = row.history;
    const uint64_t prev2 = h.size() >= 2 ? uint64_t(h[h.size() - 2]) : 999;
    std::vector<float> out;
    for (int64_t v = 0; v < vocab; ++v) {
      const uint64_t key =
          (((encoder * 131 + prev2) * 131 + uint64_t(h.back())) * 131 + h.size()) * 131 +
          uint64_t(v);
      out.push_back(float(double(mix(key) >> 40) * 6.0 / double(1 << 24) - 3.0));
    }
    return out;
  };
}

inline LogitsFn fixed_logits(std::vector<float> values) {
  return [values](const Row&) { return values; };
}

inline double log_prob(const std::vector<float>& logits, int64_t token) {
  double top = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (float l : logits) sum += std::exp(double(l) - top);
  return double(logits[size_t(token)]) - top - std::log(sum);
}

inline std::vector<double> softmax(const std::vector<double>& x) {
  const double top = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (double v : x) sum += std::exp(v - top);
  std::vector<double> p;
  for (double v : x) p.push_back(std::exp(v - top) / sum);
  return p;
}

inline Tokens concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Greedy search written from scratch: argmax of the toy's logits, stop at eos.
inline GeneratedSequence reference_greedy(const ToyModel& model, const Row& start, int64_t steps,
                                   const Tokens& eos) {
  GeneratedSequence out;
  Row row = start;
  for (int64_t s = 0; s < steps; ++s) {
    const std::vector<float> logits = model.logits_for(row);
    const int64_t best = int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.tokens.push_back(best);
    out.score += log_prob(logits, best);
    row.history.push_back(best);
    if (std::count(eos.begin(), eos.end(), best)) break;
  }
  return out;
}

}  // namespace libai::models::generation::toy
