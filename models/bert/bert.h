// BERT (Devlin et al. 2019) and RoBERTa (Liu et al. 2019): one post-LN encoder, two ways of
// numbering positions, and the heads Hugging Face ships.
//
//   embed:   h = norm(word[ids] + position[pos] + token_type[types])   // [batch, seq, hidden]
//            BERT: pos = 0, 1, ...; RoBERTa: pos = pad + cumsum(ids != pad) for real tokens
//   layers:  h = norm(h + attn(h)); h = norm(h + mlp(h))               // post-LN, padding mask
//   heads:   encoder (+ pooler: tanh(dense(h[:, 0])))
//            masked LM: bias + norm(act(dense(h))) wordᵀ               // tied decoder
//            classifier: BERT linear(pooler); RoBERTa out(tanh(dense(h[:, 0])))
#pragma once

#include "models/model.h"

namespace libai::models {

std::unique_ptr<Model> make_bert_encoder(const HfConfig& config, const LayerContext& ctx);
std::unique_ptr<Model> make_bert_masked_lm(const HfConfig& config, const LayerContext& ctx);
std::unique_ptr<Model> make_bert_classifier(const HfConfig& config, const LayerContext& ctx);
std::unique_ptr<Model> make_roberta_encoder(const HfConfig& config, const LayerContext& ctx);
std::unique_ptr<Model> make_roberta_masked_lm(const HfConfig& config, const LayerContext& ctx);
std::unique_ptr<Model> make_roberta_classifier(const HfConfig& config, const LayerContext& ctx);

}  // namespace libai::models
