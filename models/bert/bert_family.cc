// BERT's and RoBERTa's declarations (models/family.h): one encoder, two position schemes.
#include "models/bert/bert.h"
#include "models/family.h"
#include "models/stages/stage.h"

namespace libai::models {

namespace {

template <BertHead head, bool roberta>
std::unique_ptr<Model> make(const HfConfig& config, const LayerContext& ctx,
                            const std::optional<StageSpec>& part) {
  return make_bert_model(config, ctx, head, roberta, part);
}

// The encoder's layers as inference stages: no pooler, no head (pooling is the caller's).
template <bool roberta>
std::unique_ptr<stages::PipelineStage> make_stage(const HfConfig& config, const StageSpec& spec,
                                                    const LayerContext& ctx) {
  return stages::part_stage(make_bert_model(config, ctx, BertHead::none, roberta, spec));
}

template <bool roberta>
int num_layers(const HfConfig& config) {
  return int(BertConfig(config, roberta).layers);
}

template <bool roberta>
std::vector<LayerCost> layer_costs(const HfConfig& config, double tokens, double context,
                                   double bytes) {
  const BertConfig c(config, roberta);
  const LayerShape s{.hidden = double(c.hidden),
                     .inner = double(c.hidden),
                     .heads = double(c.heads),
                     .ff = double(c.intermediate)};
  return std::vector<LayerCost>(size_t(c.layers),
                                transformer_layer_cost(s, tokens, context, bytes));
}

template <bool roberta>
LayerCost embedding_cost(const HfConfig& config, double tokens, double bytes) {
  const BertConfig c(config, roberta);
  const double hidden = double(c.hidden);
  LayerCost cost;
  cost.weight_bytes = bytes * (double(c.vocab + c.positions + c.type_vocab) + 2) * hidden;
  cost.flops = 7 * tokens * hidden;  // three lookups summed, then a layer norm
  cost.activation_bytes_per_token = bytes * hidden;
  cost.output_bytes_per_token = bytes * hidden;
  return cost;
}

template <bool roberta>
LayerCost head_cost(const HfConfig& config, double, double bytes) {
  // The encoder's stages end with the last layer: no norm, no head.
  LayerCost cost;
  cost.output_bytes_per_token = bytes * double(BertConfig(config, roberta).hidden);
  return cost;
}

// l x (4 h^2 + 2 h ff) + h^2 + V h: the masked-LM head's transform and decoder, on every
// position as Hugging Face computes them.
FlopsShape flops(const HfConfig& c) {
  const double h = double(c.get_int("hidden_size", 768));
  const int64_t l = c.get_int("num_hidden_layers", 12);
  const double ff = double(c.get_int("intermediate_size", 3072));
  const double vocab = double(c.require_int("vocab_size"));
  return {.matrix_parameters = double(l) * (4 * h * h + 2 * h * ff) + h * h + vocab * h,
          .attention_blocks = l,
          .attention_width = int64_t(h)};
}

}  // namespace

const Family& bert_family() {
  using H = BertHead;
  static const Family family{
      .model_type = "bert",
      .heads = {{"", make<H::encoder, false>},
                {"BertModel", make<H::encoder, false>},
                {"BertForMaskedLM", make<H::masked_lm, false>},
                {"BertForSequenceClassification", make<H::classifier, false>},
                {"BertForPreTraining", make<H::pretraining, false>}},
      .num_layers = num_layers<false>,
      .costs = {.layers = layer_costs<false>,
                .embedding = embedding_cost<false>,
                .head = head_cost<false>},
      .flops = flops,
      .make_stage = make_stage<false>,
      .export_onnx = export_bert_onnx,
  };
  return family;
}

const Family& roberta_family() {
  using H = BertHead;
  static const Family family{
      .model_type = "roberta",
      .heads = {{"", make<H::encoder, true>},
                {"RobertaModel", make<H::encoder, true>},
                {"RobertaForMaskedLM", make<H::masked_lm, true>},
                {"RobertaForSequenceClassification", make<H::classifier, true>}},
      .num_layers = num_layers<true>,
      .costs = {.layers = layer_costs<true>,
                .embedding = embedding_cost<true>,
                .head = head_cost<true>},
      .flops = flops,
      .make_stage = make_stage<true>,
      .export_onnx = export_bert_onnx,
  };
  return family;
}

}  // namespace libai::models
