// BERT (Devlin et al. 2019) and RoBERTa (Liu et al. 2019): one post-LN encoder, two ways of
// numbering positions, and the heads Hugging Face ships.
//
//   embed:   h = dropout(norm(word[ids] + position[pos] + token_type[types]))   // [b, s, hidden]
//            BERT: pos = 0, 1, ...; RoBERTa: pos = pad + cumsum(ids != pad) for real tokens
//   layers:  h = norm(h + attn(h)); h = norm(h + mlp(h))               // post-LN, padding mask
//   heads:   encoder (+ pooler: tanh(dense(h[:, 0])))
//            masked LM: bias + norm(act(dense(h))) wordᵀ               // tied decoder
//            classifier: BERT linear(pooler); RoBERTa out(tanh(dense(h[:, 0])))
//            pretraining: masked LM + next sentence linear(pooler) -> [batch, 2]
//
// The same class is the whole model, a part of it (Note [Model parts]) and, with BertHead::none,
// an inference pipeline stage (Note [Decoding through parts]).
#pragma once

#include "models/family.h"
#include "models/layers/transformer_layer.h"
#include "models/model.h"

namespace libai::models {

// config.json of a BERT or RoBERTa model.
struct BertConfig {
  bool roberta = false;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, positions = 0;
  int64_t type_vocab = 0, pad = 0, labels = 0;
  Activation activation = Activation::gelu;
  double eps = 1e-12;
  // Hugging Face's dropout sites (active only while training): hidden after the embedding
  // norm and on each sub-layer's output, attention on the probabilities, classifier on the
  // classifier's input (and RoBERTa's between its dense and out).
  double hidden_dropout = 0.1, attention_dropout = 0.1, classifier_dropout = 0.1;

  BertConfig(const HfConfig& c, bool is_roberta);
  const char* name() const { return roberta ? "roberta" : "bert"; }
  TransformerLayerConfig layer() const;  // every layer's shape (post-LN)
};

// h = norm(word[ids] + position[pos] + token_type[types]), [batch, seq, hidden]; parameters
// word, position, token_type, norm.
class BertEmbeddings : public Module {
 public:
  BertEmbeddings(const LayerContext& ctx, const BertConfig& c);
  // ids [batch, seq] i64; types and positions undefined: zeros, and BERT's 0, 1, ... or
  // RoBERTa's pad + cumsum(ids != pad) (pad for pads).
  Tensor forward(const Tensor& ids, Tensor types = Tensor(), Tensor positions = Tensor()) const;
  const Embedding& word() const { return *word_; }  // the tied masked-LM decoder
  Embedding& word() { return *word_; }

 private:
  Tensor position_ids(const Tensor& ids) const;
  BertConfig c_;
  Embedding *word_ = nullptr, *position_ = nullptr, *token_type_ = nullptr;
  Norm* norm_ = nullptr;
  Dropout* dropout_ = nullptr;
};

// Checkpoint names -> ours of the base model: embed.{word,position,token_type,norm} and
// layers.{i} (the heads add theirs).
WeightMap bert_base_weight_map(const BertConfig& c);

// The heads Hugging Face ships. pretraining: BertForPreTraining, the masked LM (prediction_logits,
// also under logits) and the next-sentence head over the pooler (seq_relationship_logits).
// none: the encoder's layers without a pooler (the inference pipeline stages).
enum class BertHead { encoder, masked_lm, classifier, pretraining, none };

// The whole model, or one part of it (Note [Model parts]): the first part holds the embeddings
// (with their norm and dropout), the last the pooler and the head (and, for a masked LM, the
// word table its decoder is tied to). Parts before the last return hidden_states (and
// attention_mask when given).
std::unique_ptr<Model> make_bert_model(const HfConfig& config, const LayerContext& ctx,
                                       BertHead head, bool roberta,
                                       const std::optional<StageSpec>& part = std::nullopt);

// The ONNX graph of a loaded BERT or RoBERTa (Family::export_onnx; models/bert/bert_onnx.cc).
void export_bert_onnx(Model& model, const onnx::ExportOptions& options, onnx::ExportGraphs& graphs);

// The families' declarations, listed in models/registry.cc.
const Family& bert_family();
const Family& roberta_family();

}  // namespace libai::models
