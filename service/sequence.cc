#include "service/sequence.h"

#include <algorithm>

#include "models/generation/logits_process.h"

namespace libai::service {

namespace gen = models::generation;

Sequence::Sequence(GenerateRequest request, std::vector<int64_t> prompt,
                   const SequenceSettings& settings, const tokenizers::Tokenizer* tokenizer,
                   std::promise<GenerateResult> promise)
    : request_(std::move(request)),
      prompt_(std::move(prompt)),
      settings_(settings),
      // generation::generate's key of prompt 0, returned sequence 0: a request made alone
      // there draws the same tokens as here.
      sample_key_(derive(derive(RngKey{request_.seed, stream_id("generation.sample")}, 0), 0)),
      stream_(tokenizer, request_.stop),
      promise_(std::move(promise)) {
  if (settings_.decoder_start_token_id) context_ = {*settings_.decoder_start_token_id};
  else context_ = prompt_;
  result_.prompt_tokens = int64_t(prompt_.size());
}

int64_t Sequence::choose(std::span<float> scores) const {
  const GenerateRequest& r = request_;
  const int64_t generated = int64_t(result_.token_ids.size());
  if (r.repetition_penalty != 1.0) gen::apply_repetition_penalty(scores, context_, r.repetition_penalty);
  if (generated < r.min_new_tokens) gen::suppress_tokens(scores, settings_.eos_token_ids);
  if (!r.do_sample) return gen::argmax(scores);
  if (r.temperature != 1.0) gen::apply_temperature(scores, r.temperature);
  if (r.top_k != 0) gen::keep_top_k(scores, r.top_k);
  if (r.top_p < 1.0) gen::keep_top_p(scores, r.top_p);
  return gen::sample_index(scores, uniform(sample_key_, uint64_t(generated)));
}

bool Sequence::accept(int64_t token) {
  result_.token_ids.push_back(token);
  result_.completion_tokens = int64_t(result_.token_ids.size());
  context_.push_back(token);
  TokenEvent event{token, stream_.push(token)};
  const auto& eos = settings_.eos_token_ids;
  if (stream_.stopped()) {
    finished_ = true;
    result_.finish_reason = FinishReason::stop;
  } else if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
    finished_ = true;
    result_.finish_reason = FinishReason::eos;
  } else if (result_.completion_tokens >= request_.max_new_tokens) {
    finished_ = true;
    result_.finish_reason = FinishReason::length;
  }
  // The last event carries what was held back (a partial stop string, an incomplete
  // character), so the events add up to the result's text.
  if (finished_) event.text += stream_.finish();
  if (request_.on_token && !request_.on_token(event) && !finished_) {
    finished_ = true;
    result_.finish_reason = FinishReason::cancelled;
    stream_.finish();
  }
  result_.text = stream_.text();
  return finished_;
}

void Sequence::cancel() {
  if (!finished_) stream_.finish();
  finished_ = true;
  result_.finish_reason = FinishReason::cancelled;
  result_.text = stream_.text();
}

void Sequence::deliver() {
  if (delivered_) return;
  delivered_ = true;
  promise_.set_value(result_);
}

void Sequence::fail(std::exception_ptr error) {
  if (delivered_) return;
  delivered_ = true;
  finished_ = failed_ = true;
  promise_.set_exception(error);
}

}  // namespace libai::service
