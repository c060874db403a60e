#include "models/causal_lm.h"

#include <algorithm>

#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::models {

CausalInputs::CausalInputs(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id)
    : batch_(int64_t(prompts.size())) {
  LIBAI_CHECK(batch_ > 0, "generation: no prompts");
  for (size_t i = 0; i < prompts.size(); ++i)
    LIBAI_CHECK(!prompts[i].empty(), "generation: prompt ", i, " is empty");
  for (const auto& p : prompts) length_ = std::max<int64_t>(length_, int64_t(p.size()));
  prompt_ids_.assign(batch_ * length_, pad_id);
  prompt_positions_.assign(batch_ * length_, 1);
  keep_.assign(batch_ * length_, 0);
  last_position_.assign(batch_, -1);
  for (int64_t b = 0; b < batch_; ++b) {
    const auto& p = prompts[b];
    const int64_t pad = length_ - int64_t(p.size());
    for (size_t j = 0; j < p.size(); ++j) {
      prompt_ids_[b * length_ + pad + j] = p[j];
      keep_[b * length_ + pad + j] = 1;
      prompt_positions_[b * length_ + pad + j] = int64_t(j);
    }
    last_position_[b] = int64_t(p.size()) - 1;
  }
}

Tensor CausalInputs::mask() const {
  Tensor keep = Tensor::empty({batch_, length_}, DType::boolean);
  std::copy(keep_.begin(), keep_.end(), keep.data<bool>());
  return keep;
}

std::map<std::string, Tensor> CausalInputs::prefill() const {
  const int64_t n = int64_t(prompt_ids_.size()) / batch_;
  LIBAI_CHECK(n == length_ && pending_rows_.empty(),
              "generation: prefill() is the first step, before step() and select_rows()");
  return {{"input_ids", Tensor::from_vector(prompt_ids_, {batch_, n})},
          {"attention_mask", mask()},
          {"position_ids", Tensor::from_vector(prompt_positions_, {batch_, n})}};
}

std::map<std::string, Tensor> CausalInputs::step(const std::vector<int64_t>& tokens) {
  LIBAI_CHECK(int64_t(tokens.size()) == batch_, "generation: append got ", tokens.size(),
              " tokens for a batch of ", batch_);
  std::vector<uint8_t> keep(batch_ * (length_ + 1));
  for (int64_t b = 0; b < batch_; ++b) {
    std::copy_n(keep_.begin() + b * length_, length_, keep.begin() + b * (length_ + 1));
    keep[b * (length_ + 1) + length_] = 1;
    ++last_position_[b];
  }
  keep_ = std::move(keep);
  ++length_;
  std::map<std::string, Tensor> out{
      {"input_ids", Tensor::from_vector(tokens, {batch_, 1})},
      {"attention_mask", mask()},
      {"position_ids", Tensor::from_vector(last_position_, {batch_, 1})}};
  if (!pending_rows_.empty()) out["select_rows"] = Tensor::from_vector(pending_rows_);
  pending_rows_.clear();
  return out;
}

void CausalInputs::select_rows(const std::vector<int64_t>& rows) {
  LIBAI_CHECK(!rows.empty(), "select_rows: no rows");
  std::vector<uint8_t> keep(rows.size() * length_);
  std::vector<int64_t> last(rows.size()), pending(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    LIBAI_CHECK(rows[i] >= 0 && rows[i] < batch_, "select_rows: row ", rows[i], " out of range");
    std::copy_n(keep_.begin() + rows[i] * length_, length_, keep.begin() + i * length_);
    last[i] = last_position_[rows[i]];
    // The caches still hold the rows of the last step: compose with an earlier selection.
    pending[i] = pending_rows_.empty() ? rows[i] : pending_rows_[rows[i]];
  }
  keep_ = std::move(keep);
  last_position_ = std::move(last);
  pending_rows_ = std::move(pending);
  batch_ = int64_t(rows.size());
}

namespace {

// The session's own caches behind the step-function form.
CausalStepFunction with_caches(int64_t num_layers, CausalForward forward) {
  auto caches = std::make_shared<std::vector<LayerCache>>(num_layers);
  return [caches, forward = std::move(forward)](const std::map<std::string, Tensor>& in) {
    if (auto rows = in.find("select_rows"); rows != in.end())
      for (auto& c : *caches) c.select_rows(rows->second);
    return forward(
        {in.at("input_ids"), in.at("position_ids"), in.at("attention_mask"), caches.get()});
  };
}

}  // namespace

CausalLmSession::CausalLmSession(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                                 int64_t num_layers, CausalForward forward)
    : CausalLmSession(prompts, pad_id, with_caches(num_layers, std::move(forward))) {}

CausalLmSession::CausalLmSession(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                                 CausalStepFunction step)
    : inputs_(prompts, pad_id), step_(std::move(step)) {
  run(inputs_.prefill());
}

void CausalLmSession::run(const std::map<std::string, Tensor>& inputs) {
  autograd::NoGradGuard no_grad;
  Tensor logits = step_(inputs);
  logits_ = logits.dtype() == DType::f32 ? ops::contiguous(logits) : Tensor::empty(logits.shape());
  if (logits.dtype() != DType::f32) logits_.copy_from(logits);
}

void CausalLmSession::append(const std::vector<int64_t>& tokens) { run(inputs_.step(tokens)); }

void CausalLmSession::select_rows(const std::vector<int64_t>& rows) {
  inputs_.select_rows(rows);
  logits_ = ops::index_select(logits_, 0, Tensor::from_vector(rows));
}

}  // namespace libai::models
