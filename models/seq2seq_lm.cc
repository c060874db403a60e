#include "models/seq2seq_lm.h"

#include <algorithm>

#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::models {

Seq2SeqInputs::Seq2SeqInputs(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                             int64_t decoder_start_id)
    : batch_(int64_t(prompts.size())), decoder_start_id_(decoder_start_id) {
  LIBAI_CHECK(batch_ > 0, "generation: no prompts");
  for (size_t i = 0; i < prompts.size(); ++i)
    LIBAI_CHECK(!prompts[i].empty(), "generation: prompt ", i, " is empty");
  for (const auto& p : prompts)
    prompt_length_ = std::max<int64_t>(prompt_length_, int64_t(p.size()));
  prompt_ids_.assign(batch_ * prompt_length_, pad_id);
  prompt_keep_.assign(batch_ * prompt_length_, 0);
  for (int64_t b = 0; b < batch_; ++b)
    for (size_t j = 0; j < prompts[b].size(); ++j) {
      prompt_ids_[b * prompt_length_ + int64_t(j)] = prompts[b][j];
      prompt_keep_[b * prompt_length_ + int64_t(j)] = 1;
    }
}

std::map<std::string, Tensor> Seq2SeqInputs::prefill() {
  LIBAI_CHECK(decoder_length_ == 0 && pending_rows_.empty(),
              "generation: prefill() is the first step, before step() and select_rows()");
  Tensor keep = Tensor::empty({batch_, prompt_length_}, DType::boolean);
  std::copy(prompt_keep_.begin(), prompt_keep_.end(), keep.data<bool>());
  decoder_length_ = 1;
  return {
      {"input_ids", Tensor::from_vector(prompt_ids_, {batch_, prompt_length_})},
      {"attention_mask", keep},
      {"decoder_input_ids",
       Tensor::from_vector(std::vector<int64_t>(size_t(batch_), decoder_start_id_), {batch_, 1})}};
}

std::map<std::string, Tensor> Seq2SeqInputs::step(const std::vector<int64_t>& tokens) {
  LIBAI_CHECK(decoder_length_ > 0, "generation: step() before prefill()");
  LIBAI_CHECK(int64_t(tokens.size()) == batch_, "generation: append got ", tokens.size(),
              " tokens for a batch of ", batch_);
  ++decoder_length_;
  std::map<std::string, Tensor> out{
      {"decoder_input_ids", Tensor::from_vector(tokens, {batch_, 1})}};
  if (!pending_rows_.empty()) out["select_rows"] = Tensor::from_vector(pending_rows_);
  pending_rows_.clear();
  return out;
}

void Seq2SeqInputs::select_rows(const std::vector<int64_t>& rows) {
  LIBAI_CHECK(!rows.empty(), "select_rows: no rows");
  std::vector<int64_t> pending(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    LIBAI_CHECK(rows[i] >= 0 && rows[i] < batch_, "select_rows: row ", rows[i],
                " out of range for a batch of ", batch_);
    // The caches still hold the rows of the last step: compose with an earlier selection.
    pending[i] = pending_rows_.empty() ? rows[i] : pending_rows_[size_t(rows[i])];
  }
  pending_rows_ = std::move(pending);
  batch_ = int64_t(rows.size());
}

Seq2SeqLmSession::Seq2SeqLmSession(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                                   int64_t decoder_start_id, Seq2SeqStepFunction step)
    : inputs_(prompts, pad_id, decoder_start_id), step_(std::move(step)) {
  run(inputs_.prefill());
}

void Seq2SeqLmSession::run(const std::map<std::string, Tensor>& inputs) {
  autograd::NoGradGuard no_grad;
  Tensor logits = step_(inputs);
  logits_ = logits.dtype() == DType::f32 ? ops::contiguous(logits) : Tensor::empty(logits.shape());
  if (logits.dtype() != DType::f32) logits_.copy_from(logits);
}

void Seq2SeqLmSession::append(const std::vector<int64_t>& tokens) { run(inputs_.step(tokens)); }

void Seq2SeqLmSession::select_rows(const std::vector<int64_t>& rows) {
  inputs_.select_rows(rows);
  logits_ = ops::index_select(logits_, 0, Tensor::from_vector(rows));
}

}  // namespace libai::models
