#include "models/registry.h"

#include "models/bert/bert.h"
#include "models/gpt2/gpt2.h"
#include "models/t5/t5.h"
#include "models/vit/vit.h"

namespace libai::models {

const std::vector<ModelEntry>& model_registry() {
  static const std::vector<ModelEntry> table = {
      {"gpt2", "", make_gpt2_lm, make_gpt2_lm_part},
      {"gpt2", "GPT2LMHeadModel", make_gpt2_lm, make_gpt2_lm_part},
      {"bert", "", make_bert_encoder},
      {"bert", "BertModel", make_bert_encoder},
      {"bert", "BertForMaskedLM", make_bert_masked_lm},
      {"bert", "BertForSequenceClassification", make_bert_classifier},
      {"bert", "BertForPreTraining", make_bert_pretraining},
      {"roberta", "", make_roberta_encoder},
      {"roberta", "RobertaModel", make_roberta_encoder},
      {"roberta", "RobertaForMaskedLM", make_roberta_masked_lm},
      {"roberta", "RobertaForSequenceClassification", make_roberta_classifier},
      {"vit", "", make_vit_encoder},
      {"vit", "ViTModel", make_vit_encoder},
      {"vit", "ViTForImageClassification", make_vit_classifier},
      {"t5", "", make_t5_conditional_generation},
      {"t5", "T5ForConditionalGeneration", make_t5_conditional_generation},
      {"mt5", "", make_mt5_conditional_generation},
      {"mt5", "MT5ForConditionalGeneration", make_mt5_conditional_generation},
  };
  return table;
}

}  // namespace libai::models
