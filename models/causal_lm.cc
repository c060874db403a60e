#include "models/causal_lm.h"

#include <algorithm>

#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::models {

CausalLmSession::CausalLmSession(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                                 int64_t num_layers, CausalForward forward)
    : batch_(int64_t(prompts.size())), forward_(std::move(forward)), caches_(num_layers) {
  LIBAI_CHECK(batch_ > 0, "generation: no prompts");
  for (size_t i = 0; i < prompts.size(); ++i)
    LIBAI_CHECK(!prompts[i].empty(), "generation: prompt ", i, " is empty");
  for (const auto& p : prompts) length_ = std::max<int64_t>(length_, int64_t(p.size()));
  std::vector<int64_t> ids(batch_ * length_, pad_id), positions(batch_ * length_, 1);
  keep_.assign(batch_ * length_, 0);
  last_position_.assign(batch_, -1);
  for (int64_t b = 0; b < batch_; ++b) {
    const auto& p = prompts[b];
    const int64_t pad = length_ - int64_t(p.size());
    for (size_t j = 0; j < p.size(); ++j) {
      ids[b * length_ + pad + j] = p[j];
      keep_[b * length_ + pad + j] = 1;
      positions[b * length_ + pad + j] = int64_t(j);
    }
    last_position_[b] = int64_t(p.size()) - 1;
  }
  run(Tensor::from_vector(ids, {batch_, length_}), Tensor::from_vector(positions, {batch_, length_}));
}

void CausalLmSession::run(const Tensor& ids, const Tensor& positions) {
  autograd::NoGradGuard no_grad;
  Tensor keep = Tensor::empty({batch_, length_}, DType::boolean);
  std::copy(keep_.begin(), keep_.end(), keep.data<bool>());
  Tensor logits = forward_({ids, positions, keep, &caches_});
  logits_ = logits.dtype() == DType::f32 ? ops::contiguous(logits) : Tensor::empty(logits.shape());
  if (logits.dtype() != DType::f32) logits_.copy_from(logits);
}

void CausalLmSession::append(const std::vector<int64_t>& tokens) {
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
  run(Tensor::from_vector(tokens, {batch_, 1}), Tensor::from_vector(last_position_, {batch_, 1}));
}

void CausalLmSession::select_rows(const std::vector<int64_t>& rows) {
  Tensor index = Tensor::from_vector(rows);
  for (auto& c : caches_) c.select_rows(index);
  std::vector<uint8_t> keep(rows.size() * length_);
  std::vector<int64_t> last(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    LIBAI_CHECK(rows[i] >= 0 && rows[i] < batch_, "select_rows: row ", rows[i], " out of range");
    std::copy_n(keep_.begin() + rows[i] * length_, length_, keep.begin() + i * length_);
    last[i] = last_position_[rows[i]];
  }
  keep_ = std::move(keep);
  last_position_ = std::move(last);
  logits_ = ops::index_select(logits_, 0, index);
  batch_ = int64_t(rows.size());
}

}  // namespace libai::models
