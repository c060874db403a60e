#include "models/registry.h"

#include "models/bert/bert.h"
#include "models/gpt2/gpt2.h"
#include "models/t5/t5.h"
#include "models/vit/vit.h"

namespace libai::models {

namespace {

template <BertHead head, bool roberta>
std::unique_ptr<Model> bert(const HfConfig& c, const LayerContext& ctx,
                            const std::optional<StageSpec>& part) {
  return make_bert_model(c, ctx, head, roberta, part);
}
template <bool classifier>
std::unique_ptr<Model> vit(const HfConfig& c, const LayerContext& ctx,
                           const std::optional<StageSpec>& part) {
  return make_vit_model(c, ctx, classifier, part);
}
template <bool mt5>
std::unique_ptr<Model> t5(const HfConfig& c, const LayerContext& ctx,
                          const std::optional<StageSpec>& part) {
  return make_t5_model(c, ctx, mt5, part);
}

}  // namespace

const std::vector<ModelEntry>& model_registry() {
  using H = BertHead;
  static const std::vector<ModelEntry> table = {
      {"gpt2", "", make_gpt2_lm},
      {"gpt2", "GPT2LMHeadModel", make_gpt2_lm},
      {"bert", "", bert<H::encoder, false>},
      {"bert", "BertModel", bert<H::encoder, false>},
      {"bert", "BertForMaskedLM", bert<H::masked_lm, false>},
      {"bert", "BertForSequenceClassification", bert<H::classifier, false>},
      {"bert", "BertForPreTraining", bert<H::pretraining, false>},
      {"roberta", "", bert<H::encoder, true>},
      {"roberta", "RobertaModel", bert<H::encoder, true>},
      {"roberta", "RobertaForMaskedLM", bert<H::masked_lm, true>},
      {"roberta", "RobertaForSequenceClassification", bert<H::classifier, true>},
      {"vit", "", vit<false>},
      {"vit", "ViTModel", vit<false>},
      {"vit", "ViTForImageClassification", vit<true>},
      {"t5", "", t5<false>},
      {"t5", "T5ForConditionalGeneration", t5<false>},
      {"mt5", "", t5<true>},
      {"mt5", "MT5ForConditionalGeneration", t5<true>},
  };
  return table;
}

}  // namespace libai::models
