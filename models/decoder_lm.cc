#include "models/decoder_lm.h"

#include "models/causal_lm.h"
#include "ops/ops.h"

namespace libai::models {

namespace {

struct CachesState : DecodeState {
  const Model* owner = nullptr;    // the part whose new_decode_state() made it
  std::vector<LayerCache> caches;  // one per layer of the part
};

// attention_mask (any dtype) as keep flags: bool, 1 = a real token.
Tensor keep_of(const Tensor& mask) {
  if (!mask.defined() || mask.dtype() == DType::boolean) return mask;
  return ops::ne(mask, Tensor::zeros({}, mask.dtype()));
}

}  // namespace

Tensor positions_from(int64_t past, int64_t batch, int64_t n) {
  std::vector<int64_t> values(size_t(batch * n));
  for (size_t i = 0; i < values.size(); ++i) values[i] = past + int64_t(i) % n;
  return Tensor::from_vector(values, {batch, n});
}

DecoderLm::DecoderLm(const HfConfig& hf, const StageSpec& part, Shape shape)
    : Model(hf), shape_(std::move(shape)) {
  part_ = part;
}

template <typename... Args>
void DecoderLm::check(bool ok, const Args&... message) const {
  LIBAI_CHECK(ok, shape_.name, " stage ", to_string(part_), ": ", message...);
}

const Tensor& DecoderLm::hidden_input(const TensorMap& in) const {
  const Tensor& h = require_input(in, "hidden_states", shape_.name.c_str());
  check(h.dim() == 3 && h.size(2) == shape_.hidden, "hidden_states should be [batch, seq, ",
        shape_.hidden, "], got ", shape_str(h.shape()));
  return h;
}

Tensor DecoderLm::run_layers(Tensor h, const Tensor& keep, const Tensor& positions,
                             std::vector<LayerCache>* caches, std::vector<Tensor>* all,
                             bool final_norm) {
  const int64_t past = caches && !caches->empty() ? (*caches)[0].self.length() : 0;
  check_length(past + h.size(1));
  LayerInputs in;
  in.self.causal = true;
  in.self.key_padding_mask = keep;
  prepare_layers(in, h, positions);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (all) all->push_back(h);
    h = layers_[i]->forward(h, in, caches ? &(*caches)[i] : nullptr);
  }
  if (!final_norm_ || !final_norm) return h;
  h = final_norm_->forward(h);
  if (all) all->push_back(h);
  return h;
}

Tensor DecoderLm::logits_of(const Tensor& h) const { return vocab_parallel_logits(h, *head_); }

TensorMap DecoderLm::forward(const TensorMap& inputs) {
  const Tensor mask = optional_input(inputs, "attention_mask");
  const Tensor given_positions = optional_input(inputs, "position_ids");
  Tensor h, positions = given_positions;
  if (part_.is_first()) {
    const Tensor& ids = require_input(inputs, "input_ids", shape_.name.c_str());
    LIBAI_CHECK(ids.dim() == 2, shape_.name, ": input_ids should be [batch, seq], got ",
                shape_str(ids.shape()));
    if (!positions.defined()) positions = positions_from(0, ids.size(0), ids.size(1));
    check_length(ids.size(1));  // before the embeddings look positions up
    h = embed(ids, positions);
  } else {
    h = hidden_input(inputs);
    if (!positions.defined()) positions = positions_from(0, h.size(0), h.size(1));
  }
  std::vector<Tensor> all;
  h = run_layers(h, keep_of(mask), positions, nullptr, part_.is_whole() ? &all : nullptr);
  if (!part_.is_last()) {
    TensorMap out{{"hidden_states", h}};
    if (mask.defined()) out["attention_mask"] = mask;
    if (given_positions.defined()) out["position_ids"] = given_positions;
    return out;
  }
  TensorMap out{{"last_hidden_state", h}};
  put_lm_logits(out, "logits", h, *head_);
  for (size_t i = 0; i < all.size(); ++i) out["hidden_states." + std::to_string(i)] = all[i];
  return out;
}

// Note [Decoding through parts]: one step of one group (models/stages/stage.h's decoder-only
// contract): every part first reorders its caches by select_rows (none left: fresh caches),
// drops trim_front leading positions, and passes both on; the first embeds input_ids at
// position_ids (past, past + 1, ... when absent), which every part passes on (rotary layers
// need them on every part); the last returns the last position's logits [batch, vocab] in
// f32. With join_rows the step's rows are new sequences: they run over caches of their own,
// which are then appended after the group's rows, aligned on the right (Note [Continuous
// batching] in service/batcher.h), and the logits are theirs.
std::unique_ptr<DecodeState> DecoderLm::new_decode_state() const {
  auto state = std::make_unique<CachesState>();
  state->owner = this;
  state->caches.resize(layers_.size());
  return state;
}

TensorMap DecoderLm::decode_step(const TensorMap& in, DecodeState& state) {
  auto* s = dynamic_cast<CachesState*>(&state);
  check(s && s->owner == this, "the state was not made by this stage's new_state()");
  const Tensor rows = optional_input(in, "select_rows");
  const Tensor trim = optional_input(in, "trim_front");
  const Tensor join = optional_input(in, "join_rows");
  if (rows.defined()) check(rows.dim() == 1, "select_rows should be 1-d, got ", shape_str(rows.shape()));
  if (trim.defined()) check(trim.numel() == 1, "trim_front should be one number, got ", shape_str(trim.shape()));
  auto change_rows = [&] {
    if (rows.defined())
      for (auto& c : s->caches) {
        if (rows.numel() == 0) c = LayerCache{};
        else c.select_rows(rows);
      }
    if (!trim.defined()) return;
    const int64_t n = ops::contiguous(trim).to_vector<int64_t>()[0];
    const int64_t length = s->caches.empty() ? 0 : s->caches[0].self.length();
    check(n >= 0 && n <= length, "trim_front ", n, " outside the cached ", length, " positions");
    for (auto& c : s->caches) c.self.drop_front(n);
  };
  // New rows run first over caches of their own: a failure there leaves the group's as they were.
  std::vector<LayerCache> joining(join.defined() ? s->caches.size() : 0);
  if (!join.defined()) change_rows();
  auto& caches = join.defined() ? joining : s->caches;
  const int64_t past = caches.empty() ? 0 : caches[0].self.length();

  Tensor h;  // [batch, n, hidden]
  if (part_.is_first()) {
    const Tensor ids = optional_input(in, "input_ids");
    check(ids.defined(), "input \"input_ids\" is required");
    check(ids.dim() == 2, "input_ids should be [batch, seq], got ", shape_str(ids.shape()));
    h = ids;
  } else {
    h = hidden_input(in);
  }
  Tensor positions = optional_input(in, "position_ids");
  if (!positions.defined()) positions = positions_from(past, h.size(0), h.size(1));
  if (part_.is_first()) {
    check_length(past + h.size(1));  // before the embeddings look positions up
    h = embed(h, positions);
  }
  if (!caches.empty() && past > 0)
    check(caches[0].self.keys().size(0) == h.size(0), "a batch of ", h.size(0),
          " rows for KV caches of ", caches[0].self.keys().size(0),
          " rows (select_rows missing?)");
  const Tensor mask = optional_input(in, "attention_mask");
  if (mask.defined())
    check(mask.dim() == 2 && mask.size(0) == h.size(0) && mask.size(1) == past + h.size(1),
          "attention_mask should be [", h.size(0), ", ", past + h.size(1), "] (past ", past,
          " + new ", h.size(1), " tokens), got ", shape_str(mask.shape()));
  // The final norm is per position: only the last one is needed.
  h = run_layers(h, keep_of(mask), positions, &caches, nullptr, /*final_norm=*/false);

  if (join.defined()) {
    change_rows();
    for (size_t i = 0; i < caches.size(); ++i) s->caches[i].self.join_rows(caches[i].self);
  }

  if (!part_.is_last()) {
    TensorMap out{{"hidden_states", h}, {"position_ids", positions}};
    if (mask.defined()) out["attention_mask"] = mask;
    if (rows.defined()) out["select_rows"] = rows;
    if (trim.defined()) out["trim_front"] = trim;
    if (join.defined()) out["join_rows"] = join;
    return out;
  }
  Tensor logits = logits_of(final_norm_->forward(ops::select(h, 1, -1)));
  if (logits.dtype() != DType::f32) {
    Tensor f32 = Tensor::empty(logits.shape());
    f32.copy_from(logits);
    logits = f32;
  }
  return {{"logits", logits}};  // [batch, vocab]
}

std::unique_ptr<generation::DecodeSession> DecoderLm::start(
    const std::vector<std::vector<int64_t>>& prompts) {
  LIBAI_CHECK(part_.is_whole(), shape_.name, ": generation needs the whole model, not ",
              to_string(part_), " (pipelines generate through models/stages/ stages)");
  for (const auto& p : prompts)
    for (int64_t id : p)
      LIBAI_CHECK(id >= 0 && id < shape_.vocab, shape_.name, ": token id ", id,
                  " outside the vocabulary of ", shape_.vocab);
  return std::make_unique<CausalLmSession>(prompts, shape_.pad_id, int64_t(layers_.size()),
                                           [this](const CausalStep& s) { return causal_step(s); });
}

Tensor DecoderLm::causal_step(const CausalStep& s) {
  LIBAI_CHECK(part_.is_whole(), shape_.name, ": causal_step needs the whole model, not ",
              to_string(part_));
  check_length(s.keep.size(1));  // before the embeddings look positions up
  Tensor h = run_layers(embed(s.ids, s.positions), s.keep, s.positions, s.caches);
  return logits_of(ops::select(h, 1, -1));  // [batch, vocab]
}

}  // namespace libai::models
