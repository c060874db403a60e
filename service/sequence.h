// One generation request while the engine runs it: its own logits processing and token
// choice (so that a row's tokens do not depend on the rows around it), its text stream, and
// when it is finished. The engine owns every Sequence and touches them on its thread only.
//
//   Sequence s(std::move(request), prompt_ids, settings, tokenizer, std::move(promise));
//   int64_t token = s.choose(scores);   // scores: the row's next-token logits [vocab]
//   if (s.accept(token)) s.complete(metrics_lock, metrics);   // eos, length, stop or cancel
#pragma once

#include <cstdint>
#include <future>
#include <optional>
#include <span>
#include <vector>

#include "runtime/rng.h"
#include "service/service.h"
#include "service/text_stream.h"

namespace libai::service {

// What every request of one model shares.
struct SequenceSettings {
  std::vector<int64_t> eos_token_ids;
  // Encoder-decoder models: the context that repetition_penalty sees starts with the
  // decoder's start token, not the prompt (generation/generate.cc's rule).
  std::optional<int64_t> decoder_start_token_id;
};

class Sequence {
 public:
  Sequence(GenerateRequest request, std::vector<int64_t> prompt, const SequenceSettings& settings,
           const tokenizers::Tokenizer* tokenizer, std::promise<GenerateResult> promise);

  const std::vector<int64_t>& prompt() const { return prompt_; }
  const GenerateRequest& request() const { return request_; }
  // Processes the row's logits in place (transformers' order: repetition penalty, eos
  // suppression before min_new_tokens; when sampling temperature, top-k, top-p) and picks a
  // token: argmax, or a draw keyed by (seed, token index) as generation::generate draws for
  // a lone prompt, so the same seed gives the same tokens in any batch.
  int64_t choose(std::span<float> scores) const;
  // Takes the chosen token: updates the result, streams its text to on_token; true when the
  // sequence is finished (eos, max_new_tokens, a stop string, or on_token returned false).
  bool accept(int64_t token);
  // Ends the request as cancelled (CancelToken or the service closing).
  void cancel();
  bool finished() const { return finished_; }
  bool failed() const { return failed_; }
  bool cancel_requested() const { return request_.cancel.cancelled(); }
  const GenerateResult& result() const { return result_; }
  // Hands the result (or `error`) to the waiting caller; once.
  void deliver();
  void fail(std::exception_ptr error);

 private:
  GenerateRequest request_;
  std::vector<int64_t> prompt_;
  const SequenceSettings& settings_;
  std::vector<int64_t> context_;  // what repetition_penalty looks at
  RngKey sample_key_;
  TextStream stream_;
  GenerateResult result_;
  std::promise<GenerateResult> promise_;
  bool finished_ = false, failed_ = false, delivered_ = false;
};

}  // namespace libai::service
