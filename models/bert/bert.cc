#include "models/bert/bert.h"

#include "models/layers/transformer_layer.h"
#include "ops/ops.h"

namespace libai::models {

BertConfig::BertConfig(const HfConfig& c, bool is_roberta) : roberta(is_roberta) {
  vocab = c.require_int("vocab_size");
  hidden = c.get_int("hidden_size", 768);
  layers = c.get_int("num_hidden_layers", 12);
  heads = c.get_int("num_attention_heads", 12);
  intermediate = c.get_int("intermediate_size", 3072);
  positions = c.get_int("max_position_embeddings", 512);
  type_vocab = c.get_int("type_vocab_size", 2);
  pad = c.get_int("pad_token_id", roberta ? 1 : 0);
  activation = parse_activation(c.get_string("hidden_act", "gelu"), c.path() + ": hidden_act");
  eps = c.get_double("layer_norm_eps", 1e-12);
  hidden_dropout = c.get_double("hidden_dropout_prob", 0.1);
  attention_dropout = c.get_double("attention_probs_dropout_prob", 0.1);
  classifier_dropout =
      c.has("classifier_dropout") ? c.get_double("classifier_dropout", 0.1) : hidden_dropout;
  labels = int64_t(c.labels().size());
  if (labels == 0) labels = c.get_int("num_labels", 2);
  const std::string pet = c.get_string("position_embedding_type", "absolute");
  LIBAI_CHECK_KIND(Unsupported, pet == "absolute", c.path(), ": position_embedding_type \"", pet,
                   "\" is not supported (only \"absolute\")");
  LIBAI_CHECK_KIND(CorruptInput, hidden % heads == 0, c.path(), ": hidden_size ", hidden,
                   " is not divisible by num_attention_heads ", heads);
}

TransformerLayerConfig BertConfig::layer() const {
  TransformerLayerConfig layer;
  layer.attention = {.hidden = hidden, .heads = heads, .dropout = attention_dropout};
  layer.mlp = {.hidden = hidden, .intermediate = intermediate, .activation = activation};
  layer.pre_norm = false;
  layer.norm_eps = eps;
  layer.dropout = hidden_dropout;
  return layer;
}

BertEmbeddings::BertEmbeddings(const LayerContext& ctx, const BertConfig& c) : c_(c) {
  word_ = &add_module(
      "word", std::make_unique<Embedding>(ctx, c_.vocab, c_.hidden, EmbeddingParallel::vocab));
  position_ = &add_module("position", std::make_unique<Embedding>(ctx, c_.positions, c_.hidden));
  token_type_ =
      &add_module("token_type", std::make_unique<Embedding>(ctx, c_.type_vocab, c_.hidden));
  norm_ = &add_module("norm", std::make_unique<Norm>(ctx, ops::NormKind::layer, c_.hidden, c_.eps));
  dropout_ = &add_module("dropout", std::make_unique<Dropout>(c_.hidden_dropout));
}

Tensor BertEmbeddings::forward(const Tensor& ids, Tensor types, Tensor positions) const {
  LIBAI_CHECK(ids.dim() == 2, c_.name(), ": input_ids should be [batch, seq], got ",
              shape_str(ids.shape()));
  LIBAI_CHECK(ids.size(1) <= c_.positions - (c_.roberta ? c_.pad + 1 : 0), c_.name(), ": ",
              ids.size(1), " tokens exceed max_position_embeddings ", c_.positions);
  if (!types.defined()) types = Tensor::zeros(ids.shape(), DType::i64);
  if (!positions.defined()) positions = position_ids(ids);
  return dropout_->forward(norm_->forward(word_->forward(ids) + position_->forward(positions) +
                                          token_type_->forward(types)));  // [batch, seq, hidden]
}

Tensor BertEmbeddings::position_ids(const Tensor& ids) const {
  if (!c_.roberta)
    return ops::contiguous(
        ops::expand(ops::unsqueeze(Tensor::arange(ids.size(1)), 0), ids.shape()));
  auto v = ids.to_vector<int64_t>();
  const int64_t seq = ids.size(1);
  std::vector<int64_t> pos(v.size());
  for (int64_t b = 0; b < ids.size(0); ++b) {
    int64_t count = 0;
    for (int64_t j = 0; j < seq; ++j) {
      const bool real = v[b * seq + j] != c_.pad;
      count += real;
      pos[b * seq + j] = real ? c_.pad + count : c_.pad;
    }
  }
  return Tensor::from_vector(pos, ids.shape());
}

WeightMap bert_base_weight_map(const BertConfig& c) {
  WeightMap map;
  map.source_prefixes = {"", c.roberta ? "roberta." : "bert."};
  auto both = [&](const std::string& ours, const std::string& hf) {
    map.add(ours + ".weight", hf + ".weight");
    map.add(ours + ".bias", hf + ".bias");
  };
  map.add("embed.word.weight", "embeddings.word_embeddings.weight");
  map.add("embed.position.weight", "embeddings.position_embeddings.weight");
  map.add("embed.token_type.weight", "embeddings.token_type_embeddings.weight");
  both("embed.norm", "embeddings.LayerNorm");
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string o = "layers." + std::to_string(i) + ".",
                      h = "encoder.layer." + std::to_string(i) + ".";
    for (const char* part : {"weight", "bias"}) {
      const std::string p = part;
      map.add_heads(o + "attention.qkv." + p,
                    {h + "attention.self.query." + p, h + "attention.self.key." + p,
                     h + "attention.self.value." + p},
                    3, c.heads);
    }
    both(o + "attention.out", h + "attention.output.dense");
    both(o + "attention_norm", h + "attention.output.LayerNorm");
    both(o + "mlp.up", h + "intermediate.dense");
    both(o + "mlp.down", h + "output.dense");
    both(o + "mlp_norm", h + "output.LayerNorm");
  }
  map.ignore("embeddings.position_ids");
  return map;
}

namespace {

// The masked-LM head's output bias, split over the vocabulary like the word embeddings
// (padded when the vocabulary does not divide).
class VocabBias : public Module {
 public:
  VocabBias(const LayerContext& ctx, int64_t vocab)
      : bias(&add_parameter("bias", {vocab}, ctx, 0, /*pad_uneven=*/true)) {}
  Tensor* bias;
};

using Head = BertHead;

class Bert : public Model {
 public:
  Bert(const HfConfig& hf, const LayerContext& ctx, bool roberta, Head head, const StageSpec& part)
      : Model(hf), c_(hf, roberta), head_(head) {
    part_ = part;
    Embedding* word = nullptr;
    if (part.is_first()) {
      embed_ = &add_module("embed", std::make_unique<BertEmbeddings>(ctx, c_));
      word = &embed_->word();
    } else if (part.is_last() && has_mlm()) {  // the masked-LM decoder is tied to it
      word = &add_module("embed.word", std::make_unique<Embedding>(ctx, c_.vocab, c_.hidden,
                                                                   EmbeddingParallel::vocab));
    }
    if (part.is_last() && has_mlm()) word->serve_as_output();
    word_ = word;
    for (int i = part.first_layer; i < part.last_layer; ++i)
      layers_.push_back(&add_module("layers." + std::to_string(i),
                                    std::make_unique<TransformerLayer>(ctx, c_.layer())));
    if (part.is_last()) build_head(ctx, roberta, head);
    build_weight_map();
  }

  void build_head(const LayerContext& ctx, bool roberta, Head head) {
    // Hugging Face builds the masked-LM model and RoBERTa's classifier without a pooler.
    const bool pooler = head == Head::encoder || head == Head::pretraining ||
                        (head == Head::classifier && !roberta);
    if (pooler)
      pooler_ = &add_module("pooler", std::make_unique<Linear>(ctx, c_.hidden, c_.hidden));
    if (has_mlm()) {
      mlm_dense_ = &add_module("mlm.dense", std::make_unique<Linear>(ctx, c_.hidden, c_.hidden));
      mlm_norm_ = &add_module("mlm.norm", norm(ctx));
      // A module of its own so the parameter is named "bias" (LiBai's weight_decay_bias).
      mlm_bias_ = add_module("mlm.output", std::make_unique<VocabBias>(ctx, c_.vocab)).bias;
    }
    if (head == Head::pretraining)
      nsp_ = &add_module("nsp", std::make_unique<Linear>(ctx, c_.hidden, 2));
    if (head == Head::classifier) {
      if (roberta)
        cls_dense_ =
            &add_module("classifier.dense", std::make_unique<Linear>(ctx, c_.hidden, c_.hidden));
      cls_out_ = &add_module("classifier.out", std::make_unique<Linear>(ctx, c_.hidden, c_.labels));
      cls_dropout_ =
          &add_module("classifier.dropout", std::make_unique<Dropout>(c_.classifier_dropout));
      if (roberta)
        cls_hidden_dropout_ = &add_module("classifier.hidden_dropout",
                                          std::make_unique<Dropout>(c_.classifier_dropout));
    }
  }

  TensorMap forward(const TensorMap& inputs) override {
    Tensor mask = optional_input(inputs, "attention_mask");
    Tensor keep = mask.defined() ? ops::ne(mask, Tensor::zeros({}, mask.dtype())) : Tensor();
    Tensor h;  // [batch, seq, hidden]
    if (part_.is_first()) {
      h = embed_->forward(require_input(inputs, "input_ids", c_.name()),
                          optional_input(inputs, "token_type_ids"),
                          optional_input(inputs, "position_ids"));
    } else {
      h = require_input(inputs, "hidden_states", c_.name());
      LIBAI_CHECK(h.dim() == 3 && h.size(2) == c_.hidden, c_.name(), " ", to_string(part_),
                  ": hidden_states should be [batch, seq, ", c_.hidden, "], got ",
                  shape_str(h.shape()));
    }
    const bool whole = part_.is_whole();
    TensorMap out;
    if (whole) out["hidden_states.0"] = h;
    LayerInputs in;
    in.self.key_padding_mask = keep;
    for (size_t i = 0; i < layers_.size(); ++i) {
      h = layers_[i]->forward(h, in);
      if (whole) out["hidden_states." + std::to_string(i + 1)] = h;
    }
    if (!part_.is_last()) {
      out["hidden_states"] = h;
      if (mask.defined()) out["attention_mask"] = mask;
      return out;
    }
    out["last_hidden_state"] = h;
    Tensor first = ops::select(h, 1, 0);  // [batch, hidden]
    if (pooler_) out["pooler_output"] = ops::tanh(pooler_->forward(first));
    if (has_mlm()) {
      Tensor t = mlm_norm_->forward(apply_activation(mlm_activation(), mlm_dense_->forward(h)));
      put_lm_logits(out, "logits", t, *word_, *mlm_bias_);  // [batch, seq, vocab]
    }
    if (head_ == Head::pretraining) {
      if (out.count("logits")) out["prediction_logits"] = out["logits"];
      out["seq_relationship_logits"] = nsp_->forward(out["pooler_output"]);  // [batch, 2]
    } else if (head_ == Head::classifier) {
      Tensor x = c_.roberta ? cls_hidden_dropout_->forward(
                                  ops::tanh(cls_dense_->forward(cls_dropout_->forward(first))))
                            : cls_dropout_->forward(out["pooler_output"]);
      out["logits"] = cls_out_->forward(x);  // [batch, labels]
    }
    return out;
  }

  // Note [Decoding through parts]: the encoders' stage contract of models/stages/stage.h
  // (nothing kept between micro-batches; the last part returns last_hidden_state, pooling and
  // heads are the caller's).
  std::unique_ptr<DecodeState> new_decode_state() const override {
    return std::make_unique<DecodeState>();
  }

  TensorMap decode_step(const TensorMap& in, DecodeState&) override {
    Tensor h;  // [batch, seq, hidden]
    if (part_.is_first()) {
      const Tensor ids = optional_input(in, "input_ids");
      check(ids.defined(), "input \"input_ids\" is required");
      h = embed_->forward(ids, optional_input(in, "token_type_ids"),
                          optional_input(in, "position_ids"));
    } else {
      h = optional_input(in, "hidden_states");
      check(h.defined(), "input \"hidden_states\" is required");
      check(h.dim() == 3 && h.size(2) == c_.hidden, "hidden_states should be [batch, seq, ",
            c_.hidden, "], got ", shape_str(h.shape()));
    }
    const Tensor mask = optional_input(in, "attention_mask");
    if (mask.defined())
      check(mask.dim() == 2 && mask.size(0) == h.size(0) && mask.size(1) == h.size(1),
            "attention_mask should be [", h.size(0), ", ", h.size(1), "], got ",
            shape_str(mask.shape()));
    LayerInputs layer_in;
    if (mask.defined())
      layer_in.self.key_padding_mask =
          mask.dtype() == DType::boolean ? mask : ops::ne(mask, Tensor::zeros({}, mask.dtype()));
    for (TransformerLayer* layer : layers_) h = layer->forward(h, layer_in);
    TensorMap out{{part_.is_last() ? "last_hidden_state" : "hidden_states", h}};
    if (mask.defined()) out["attention_mask"] = mask;
    return out;
  }

  Task task() const override {
    switch (head_) {
      case Head::masked_lm: return Task::masked_lm;
      case Head::classifier: return Task::sequence_classification;
      case Head::pretraining: return Task::pretraining;
      default: return Task::encoder;
    }
  }
  const WeightMap& weight_map() const override { return map_; }

 private:
  std::unique_ptr<Norm> norm(const LayerContext& ctx) {
    return std::make_unique<Norm>(ctx, ops::NormKind::layer, c_.hidden, c_.eps);
  }
  // RoBERTa's LM head always uses exact gelu; BERT's uses hidden_act.
  bool has_mlm() const { return head_ == Head::masked_lm || head_ == Head::pretraining; }
  Activation mlm_activation() const { return c_.roberta ? Activation::gelu : c_.activation; }

  void build_weight_map() {
    map_ = bert_base_weight_map(c_);
    auto both = [&](const std::string& ours, const std::string& hf) {
      map_.add(ours + ".weight", hf + ".weight");
      map_.add(ours + ".bias", hf + ".bias");
    };
    if (pooler_) both("pooler", "pooler.dense");
    if (has_mlm()) {
      // The heads live outside the base model's prefix: list them with the prefix stripped
      // so that both "" and "bert." resolve them (they never carry the base prefix).
      if (c_.roberta) {
        both("mlm.dense", "lm_head.dense");
        both("mlm.norm", "lm_head.layer_norm");
        map_.add("mlm.output.bias", "lm_head.bias");
        map_.ignore("lm_head.decoder.weight");
        map_.ignore("lm_head.decoder.bias");
      } else {
        both("mlm.dense", "cls.predictions.transform.dense");
        both("mlm.norm", "cls.predictions.transform.LayerNorm");
        map_.add("mlm.output.bias", "cls.predictions.bias");
        map_.ignore("cls.predictions.decoder.weight");
        map_.ignore("cls.predictions.decoder.bias");
      }
    }
    if (head_ == Head::classifier) {
      if (c_.roberta) {
        both("classifier.dense", "classifier.dense");
        both("classifier.out", "classifier.out_proj");
      } else {
        both("classifier.out", "classifier");
      }
    }
    if (head_ == Head::pretraining) {
      both("nsp", "cls.seq_relationship");
    } else {
      map_.ignore("cls.seq_relationship.weight");
      map_.ignore("cls.seq_relationship.bias");
    }
  }

  template <typename... Args>
  void check(bool ok, const Args&... message) const {
    LIBAI_CHECK(ok, c_.name(), " stage ", to_string(part_), ": ", message...);
  }

  BertConfig c_;
  Head head_;
  BertEmbeddings* embed_ = nullptr;  // the first part
  const Embedding* word_ = nullptr;  // embed_'s word table, or the last part's copy (tied head)
  std::vector<TransformerLayer*> layers_;
  Linear* pooler_ = nullptr;
  Linear *mlm_dense_ = nullptr, *cls_dense_ = nullptr, *cls_out_ = nullptr, *nsp_ = nullptr;
  Norm* mlm_norm_ = nullptr;
  Dropout *cls_dropout_ = nullptr, *cls_hidden_dropout_ = nullptr;
  Tensor* mlm_bias_ = nullptr;
  WeightMap map_;
};

}  // namespace

std::unique_ptr<Model> make_bert_model(const HfConfig& config, const LayerContext& ctx,
                                       BertHead head, bool roberta,
                                       const std::optional<StageSpec>& part) {
  const int layers = int(BertConfig(config, roberta).layers);
  if (part) check_part(config, *part, layers);
  return std::make_unique<Bert>(config, ctx, roberta, head,
                                part.value_or(StageSpec{0, layers, layers}));
}

}  // namespace libai::models
