// BERT's and RoBERTa's stages: the encoder of models/bert/bert.h cut by layer, under the same
// parameter names (the heads are not part of any stage).
//
//   first:  h = embed(input_ids, token_type_ids, position_ids)
//   every:  h = layers[first..last)(h), padding mask from attention_mask
//   last:   last_hidden_state = h                       // post-LN: no norm after the layers
#include "models/bert/bert.h"
#include "models/pipeline/stage_inputs.h"

namespace libai::models::pipeline {

namespace {

class BertStage : public PipelineStage {
 public:
  BertStage(const HfConfig& hf, const StageSpec& spec, const LayerContext& ctx, bool roberta)
      : PipelineStage(spec), c_(hf, roberta), map_(bert_base_weight_map(c_)) {
    if (spec.is_first()) embed_ = &add_module("embed", std::make_unique<BertEmbeddings>(ctx, c_));
    for (int i = spec.first_layer; i < spec.last_layer; ++i)
      layers_.push_back(&add_module("layers." + std::to_string(i),
                                    std::make_unique<TransformerLayer>(ctx, c_.layer())));
  }

  std::unique_ptr<StageState> new_state() const override { return std::make_unique<StageState>(); }

  Activations forward(const Activations& in, StageState&) override {
    Tensor h;  // [batch, seq, hidden]
    if (spec().is_first())
      h = embed_->forward(require_activation(in, "input_ids", c_.name(), spec()),
                          optional_input(in, "token_type_ids"), optional_input(in, "position_ids"));
    else
      h = require_hidden_states(in, c_.hidden, c_.name(), spec());
    const Tensor mask = optional_input(in, "attention_mask");
    if (mask.defined())
      LIBAI_CHECK(mask.dim() == 2 && mask.size(0) == h.size(0) && mask.size(1) == h.size(1),
                  c_.name(), " stage ", to_string(spec()), ": attention_mask should be [",
                  h.size(0), ", ", h.size(1), "], got ", shape_str(mask.shape()));
    LayerInputs layer_in;
    layer_in.self.key_padding_mask = keep_mask(mask);
    for (TransformerLayer* layer : layers_) h = layer->forward(h, layer_in);
    Activations out{{spec().is_last() ? "last_hidden_state" : "hidden_states", h}};
    if (mask.defined()) out["attention_mask"] = mask;
    return out;
  }

  const WeightMap& weight_map() const override { return map_; }

 private:
  BertConfig c_;
  WeightMap map_;
  BertEmbeddings* embed_ = nullptr;  // first stage
  std::vector<TransformerLayer*> layers_;
};

}  // namespace

}  // namespace libai::models::pipeline

namespace libai::models {

std::unique_ptr<pipeline::PipelineStage> make_bert_stage(const HfConfig& config, const StageSpec& spec,
                                               const LayerContext& ctx) {
  return std::make_unique<pipeline::BertStage>(config, spec, ctx, /*roberta=*/false);
}

std::unique_ptr<pipeline::PipelineStage> make_roberta_stage(const HfConfig& config, const StageSpec& spec,
                                                  const LayerContext& ctx) {
  return std::make_unique<pipeline::BertStage>(config, spec, ctx, /*roberta=*/true);
}

}  // namespace libai::models
