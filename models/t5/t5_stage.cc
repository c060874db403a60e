// T5's and MT5's stages: models/t5/t5.h's model cut by layer, the encoder's layers first, then
// the decoder's, under the same parameter names (stage.h has the message contract).
//
//   first:    d = shared[decoder_input_ids];  step 0: h = shared[input_ids]
//   encoder:  step 0 only: h = encoder.layers[..](h), bias from encoder.relative_bias
//             the stage of the last encoder layer: memory = encoder.final_norm(h)
//   decoder:  step 0: cross-attention K/V of memory into the caches, memory's mask kept
//             every step: caches = caches[select_rows]
//             d = decoder.layers[..](d), causal, bias from decoder.relative_bias at past
//   last:     logits = (decoder.final_norm(d[:, -1]) (* d_model^-0.5)) lm_headᵀ   // [batch, vocab]
//
// Each stack's first layer computes the relative position bias in the whole model; here every
// stage that holds layers of a stack loads that stack's table ([num_buckets, heads], small)
// and recomputes the bias, which costs less than sending [heads, q, k] along.
#include <cmath>

#include "models/pipeline/stage_inputs.h"
#include "models/t5/t5.h"
#include "ops/ops.h"

namespace libai::models::pipeline {

namespace {

struct Seq2SeqState : StageState {
  const PipelineStage* owner = nullptr;  // the stage whose new_state() made it
  bool started = false;                  // step 0 (the encoder's) ran
  std::vector<LayerCache> caches;        // one per decoder layer of the stage
  Tensor memory_keep;                    // [batch, source] bool; undefined: all real
};

// One stack's part in a stage: its bias table and layers [first, last) of the stack.
struct StackPart {
  T5StackConfig config;
  Embedding* relative_bias = nullptr;
  std::vector<TransformerLayer*> layers;
  Norm* final_norm = nullptr;  // when the stage holds the stack's last layer
};

class T5Stage : public PipelineStage {
 public:
  T5Stage(const HfConfig& hf, const StageSpec& spec, const LayerContext& ctx, bool mt5)
      : PipelineStage(spec), c_(hf, mt5), map_(t5_weight_map(c_)) {
    const int e = int(c_.encoder_layers);
    if (spec.is_first() || (spec.is_last() && c_.tied))
      shared_ = &add_module("shared", std::make_unique<Embedding>(ctx, c_.vocab, c_.d_model,
                                                                  EmbeddingParallel::vocab));
    build_part(ctx, encoder_, "encoder", false, spec.first_layer, std::min(spec.last_layer, e));
    build_part(ctx, decoder_, "decoder", true, std::max(spec.first_layer, e) - e,
               spec.last_layer - e);
    if (spec.is_last() && !c_.tied)
      lm_head_ = &add_module("lm_head", std::make_unique<Embedding>(ctx, c_.vocab, c_.d_model,
                                                                    EmbeddingParallel::vocab));
  }

  std::unique_ptr<StageState> new_state() const override {
    auto state = std::make_unique<Seq2SeqState>();
    state->owner = this;
    state->caches.resize(decoder_.layers.size());
    return state;
  }

  Activations forward(const Activations& in, StageState& state) override {
    auto* s = dynamic_cast<Seq2SeqState*>(&state);
    check(s && s->owner == this, "the state was not made by this stage's new_state()");
    const bool prefill = !s->started;
    if (!prefill)
      for (const char* name : {"input_ids", "hidden_states", "encoder_hidden_states"})
        check(!optional_input(in, name).defined(), "input \"", name,
              "\" at a decoding step: the group's encoder already ran at its step 0");
    const Tensor rows = optional_input(in, "select_rows");
    if (rows.defined()) {
      check(!prefill, "select_rows at step 0: there is nothing to reorder yet");
      for (auto& cache : s->caches) cache.select_rows(rows);
      if (s->memory_keep.defined()) s->memory_keep = ops::index_select(s->memory_keep, 0, rows);
    }

    Tensor d;                    // the decoder's hidden states [batch, n, d_model]
    Tensor h, mask;              // step 0, inside the encoder: [batch, source, d_model], mask
    Tensor memory, memory_mask;  // step 0, after the encoder: its output and mask
    if (spec().is_first()) {
      const Tensor& ids = require_activation(in, "decoder_input_ids", family(), spec());
      check(ids.dim() == 2, "decoder_input_ids should be [batch, n], got ", shape_str(ids.shape()));
      d = shared_->forward(ids);
      if (prefill) {
        const Tensor& source = require_activation(in, "input_ids", family(), spec());
        check(source.dim() == 2 && source.size(0) == ids.size(0), "input_ids should be [",
              ids.size(0), ", source], got ", shape_str(source.shape()));
        h = shared_->forward(source);
        mask = optional_input(in, "attention_mask");
      }
    } else {
      d = require_named_states(in, "decoder_hidden_states");
      if (prefill && !encoder_.layers.empty()) {
        h = require_named_states(in, "hidden_states");
        mask = optional_input(in, "attention_mask");
      } else if (prefill) {
        memory = require_named_states(in, "encoder_hidden_states");
        memory_mask = optional_input(in, "encoder_attention_mask");
      }
    }

    if (prefill && !encoder_.layers.empty()) {
      check_mask(mask, "attention_mask", h);
      LayerInputs layer_in;
      layer_in.self.key_padding_mask = keep_mask(mask);
      layer_in.self.bias = t5_relative_bias(*encoder_.relative_bias, encoder_.config, h.size(1), 0);
      for (TransformerLayer* layer : encoder_.layers) h = layer->forward(h, layer_in);
      if (encoder_.final_norm) {
        memory = encoder_.final_norm->forward(h);  // the encoder's output
        memory_mask = mask;
        h = mask = Tensor();
      }
    }

    if (!decoder_.layers.empty()) {
      if (prefill) {
        LIBAI_ASSERT(memory.defined(), "t5 stage: no encoder output at step 0");
        check(memory.size(0) == d.size(0), "encoder_hidden_states has ", memory.size(0),
              " rows for ", d.size(0), " decoder rows");
        check_mask(memory_mask, "encoder_attention_mask", memory);
        s->memory_keep = keep_mask(memory_mask);
      }
      const int64_t past = s->caches[0].self.length();
      if (past > 0)
        check(s->caches[0].self.keys().size(0) == d.size(0), "a batch of ", d.size(0),
              " rows for caches of ", s->caches[0].self.keys().size(0),
              " rows (select_rows missing?)");
      LayerInputs layer_in;
      layer_in.self.causal = true;
      layer_in.self.bias =
          t5_relative_bias(*decoder_.relative_bias, decoder_.config, d.size(1), past);
      layer_in.cross.memory = memory;  // step 0 fills the cross-attention caches from it
      layer_in.cross.key_padding_mask = s->memory_keep;
      for (size_t i = 0; i < decoder_.layers.size(); ++i)
        d = decoder_.layers[i]->forward(d, layer_in, &s->caches[i]);
    }
    s->started = true;

    if (spec().is_last()) return {{"logits", logits_of_last(d)}};
    Activations out{{"decoder_hidden_states", d}};
    if (rows.defined()) out["select_rows"] = rows;
    if (h.defined()) {  // the encoder goes on in the next stage
      out["hidden_states"] = h;
      if (mask.defined()) out["attention_mask"] = mask;
    } else if (memory.defined()) {  // step 0: the next stage's decoder layers need it too
      out["encoder_hidden_states"] = memory;
      if (memory_mask.defined()) out["encoder_attention_mask"] = memory_mask;
    }
    return out;
  }

  const WeightMap& weight_map() const override { return map_; }

 private:
  const char* family() const { return c_.name.c_str(); }

  template <typename... Args>
  void check(bool ok, const Args&... message) const {
    LIBAI_CHECK(ok, c_.name, " stage ", to_string(spec()), ": ", message...);
  }

  const Tensor& require_named_states(const Activations& in, const std::string& name) const {
    const Tensor& t = require_activation(in, name, family(), spec());
    check(t.dim() == 3 && t.size(2) == c_.d_model, name, " should be [batch, seq, ", c_.d_model,
          "], got ", shape_str(t.shape()));
    return t;
  }

  void check_mask(const Tensor& mask, const char* name, const Tensor& states) const {
    if (mask.defined())
      check(mask.dim() == 2 && mask.size(0) == states.size(0) && mask.size(1) == states.size(1),
            name, " should be [", states.size(0), ", ", states.size(1), "], got ",
            shape_str(mask.shape()));
  }

  // Layers [first, last) of one stack (none when first >= last).
  void build_part(const LayerContext& ctx, StackPart& part, const std::string& stack, bool decoder,
                  int first, int last) {
    part.config = c_.stack(decoder);
    if (first >= last) return;
    const TransformerLayerConfig& layer = part.config.layer;
    part.relative_bias = &add_module(
        stack + ".relative_bias",
        std::make_unique<Embedding>(ctx, c_.num_buckets, c_.heads, EmbeddingParallel::dim));
    for (int i = first; i < last; ++i)
      part.layers.push_back(&add_module(stack + ".layers." + std::to_string(i),
                                        std::make_unique<TransformerLayer>(ctx, layer)));
    if (last == int(part.config.layers))
      part.final_norm = &add_module(
          stack + ".final_norm",
          std::make_unique<Norm>(ctx, layer.norm, c_.d_model, layer.norm_eps, layer.norm_bias));
  }

  // The decoder's last position -> [batch, vocab] f32, as T5's session computes it.
  Tensor logits_of_last(const Tensor& d) const {
    Tensor x = decoder_.final_norm->forward(ops::select(d, 1, -1));  // the norm is per position
    if (c_.scale_output) x = x * (1.0 / std::sqrt(double(c_.d_model)));
    Tensor logits = vocab_parallel_logits(x, lm_head_ ? *lm_head_ : *shared_);
    if (logits.dtype() != DType::f32) {
      Tensor f32 = Tensor::empty(logits.shape());
      f32.copy_from(logits);
      logits = f32;
    }
    return logits;
  }

  T5Config c_;
  WeightMap map_;
  Embedding* shared_ = nullptr;  // the first stage, and the last when the head is tied
  StackPart encoder_, decoder_;
  Embedding* lm_head_ = nullptr;  // the last stage, untied
};

}  // namespace

}  // namespace libai::models::pipeline

namespace libai::models {

std::unique_ptr<pipeline::PipelineStage> make_t5_stage(const HfConfig& config, const StageSpec& spec,
                                             const LayerContext& ctx) {
  return std::make_unique<pipeline::T5Stage>(config, spec, ctx, /*mt5=*/false);
}

std::unique_ptr<pipeline::PipelineStage> make_mt5_stage(const HfConfig& config, const StageSpec& spec,
                                              const LayerContext& ctx) {
  return std::make_unique<pipeline::T5Stage>(config, spec, ctx, /*mt5=*/true);
}

}  // namespace libai::models
