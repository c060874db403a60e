// GPT-2's stages: models/gpt2/gpt2.h's model cut by layer, under the same parameter names.
//
//   first:  h = embed[input_ids] + positions[position_ids]
//   every:  caches = caches[select_rows]
//           h = layers[first..last)(h), causal, attention_mask over past + n, KV caches
//   last:   logits = final_norm(h[:, -1]) embedᵀ                 // [batch, vocab] f32
#include "models/gpt2/gpt2.h"
#include "models/pipeline/stage_inputs.h"
#include "ops/ops.h"

namespace libai::models::pipeline {

namespace {

struct CausalState : StageState {
  const PipelineStage* owner = nullptr;  // the stage whose new_state() made it
  std::vector<LayerCache> caches;        // one per layer of the stage
};

class Gpt2Stage : public PipelineStage {
 public:
  Gpt2Stage(const HfConfig& hf, const StageSpec& spec, const LayerContext& ctx)
      : PipelineStage(spec), c_(hf), map_(gpt2_weight_map(c_)) {
    if (spec.is_first() || spec.is_last())  // the last stage's head is tied to it
      wte_ = &add_module(
          "embed", std::make_unique<Embedding>(ctx, c_.vocab, c_.hidden, EmbeddingParallel::vocab));
    if (spec.is_first())
      wpe_ = &add_module("positions", std::make_unique<Embedding>(ctx, c_.positions, c_.hidden));
    for (int i = spec.first_layer; i < spec.last_layer; ++i)
      layers_.push_back(&add_module("layers." + std::to_string(i),
                                    std::make_unique<TransformerLayer>(ctx, c_.layer())));
    if (spec.is_last())
      ln_f_ = &add_module("final_norm",
                          std::make_unique<Norm>(ctx, ops::NormKind::layer, c_.hidden, c_.eps));
  }

  std::unique_ptr<StageState> new_state() const override {
    auto state = std::make_unique<CausalState>();
    state->owner = this;
    state->caches.resize(layers_.size());
    return state;
  }

  Activations forward(const Activations& in, StageState& state) override {
    auto* causal = dynamic_cast<CausalState*>(&state);
    LIBAI_CHECK(causal && causal->owner == this, "gpt2 stage ", to_string(spec()),
                ": the state was not made by this stage's new_state()");
    auto& caches = causal->caches;
    const Tensor rows = optional_input(in, "select_rows");
    if (rows.defined())
      for (auto& c : caches) c.select_rows(rows);
    const int64_t past = caches.empty() ? 0 : caches[0].self.length();

    Tensor h;  // [batch, n, hidden]
    Tensor positions = optional_input(in, "position_ids");
    const Tensor mask = optional_input(in, "attention_mask");
    if (spec().is_first()) {
      const Tensor& ids = require_activation(in, "input_ids", "gpt2", spec());
      LIBAI_CHECK(ids.dim() == 2, "gpt2 stage ", to_string(spec()),
                  ": input_ids should be [batch, seq], got ", shape_str(ids.shape()));
      if (!positions.defined()) {  // past, past + 1, ... in every row
        std::vector<int64_t> values(ids.numel());
        for (size_t i = 0; i < values.size(); ++i) values[i] = past + int64_t(i) % ids.size(1);
        positions = Tensor::from_vector(values, ids.shape());
      }
      LIBAI_CHECK(past + ids.size(1) <= c_.positions, "gpt2: sequence of ", past + ids.size(1),
                  " tokens exceeds n_positions ", c_.positions);
      h = wte_->forward(ids) + wpe_->forward(positions);
    } else {
      h = require_hidden_states(in, c_.hidden, "gpt2", spec());
    }
    if (!caches.empty() && past > 0)
      LIBAI_CHECK(caches[0].self.keys().size(0) == h.size(0), "gpt2 stage ", to_string(spec()),
                  ": a batch of ", h.size(0), " rows for KV caches of ",
                  caches[0].self.keys().size(0), " rows (select_rows missing?)");
    if (mask.defined())
      LIBAI_CHECK(mask.dim() == 2 && mask.size(0) == h.size(0) && mask.size(1) == past + h.size(1),
                  "gpt2 stage ", to_string(spec()), ": attention_mask should be [", h.size(0), ", ",
                  past + h.size(1), "] (past ", past, " + new ", h.size(1), " tokens), got ",
                  shape_str(mask.shape()));

    LayerInputs layer_in;
    layer_in.self.causal = true;
    layer_in.self.key_padding_mask = keep_mask(mask);
    for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i]->forward(h, layer_in, &caches[i]);

    Activations out;
    if (mask.defined()) out["attention_mask"] = mask;
    if (positions.defined()) out["position_ids"] = positions;
    if (rows.defined()) out["select_rows"] = rows;
    if (!spec().is_last()) {
      out["hidden_states"] = h;
      return out;
    }
    // The norm is per position: only the last one is needed.
    Tensor logits = vocab_parallel_logits(ln_f_->forward(ops::select(h, 1, -1)), *wte_);
    if (logits.dtype() != DType::f32) {
      Tensor f32 = Tensor::empty(logits.shape());
      f32.copy_from(logits);
      logits = f32;
    }
    return {{"logits", logits}};  // [batch, vocab]
  }

  const WeightMap& weight_map() const override { return map_; }

 private:
  Gpt2Config c_;
  WeightMap map_;
  Embedding* wte_ = nullptr;  // first and last stages
  Embedding* wpe_ = nullptr;  // first stage
  std::vector<TransformerLayer*> layers_;
  Norm* ln_f_ = nullptr;  // last stage
};

}  // namespace

}  // namespace libai::models::pipeline

namespace libai::models {

std::unique_ptr<pipeline::PipelineStage> make_gpt2_stage(const HfConfig& config, const StageSpec& spec,
                                               const LayerContext& ctx) {
  return std::make_unique<pipeline::Gpt2Stage>(config, spec, ctx);
}

}  // namespace libai::models
