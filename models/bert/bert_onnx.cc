// BERT's and RoBERTa's ONNX graphs (models/onnx/export.h), the same computation as bert.cc:
//
//   in:  input_ids, attention_mask [batch, sequence] i64; BERT also token_type_ids
//        (RoBERTa's single token type is folded in, as the runtime's default zeros)
//   out: by head (config.json's architectures[0]):
//        encoder (BertModel, RobertaModel):  last_hidden_state [batch, sequence, hidden],
//                                            pooler_output [batch, hidden]
//        masked LM:                          logits [batch, sequence, vocab]
//        sequence classification:            logits [batch, labels]
//        pretraining (BertForPreTraining):   prediction_logits, seq_relationship_logits [batch, 2]
//
// Positions: BERT 0, 1, ...; RoBERTa pad + cumsum(ids != pad) for real tokens and pad for
// pads, from input_ids as the runtime numbers them.
#include <cmath>

#include "models/bert/bert.h"
#include "models/onnx/blocks.h"
#include "models/onnx/export.h"

namespace libai::models {

namespace {

using namespace onnx;

Value positions(GraphBuilder& g, const BertConfig& c, const Value& ids) {
  GraphBuilder::Scope scope(g, "positions");
  if (!c.roberta) {
    const Value length = g.op("Squeeze", {dim_of(g, ids, 1), g.ints({0}, "axes")});
    return g.op("Range", {g.scalar_int(0, "zero"), length, g.scalar_int(1, "one")});  // [seq]
  }
  const Value real = g.op("Cast", {g.op("Not", {g.op("Equal", {ids, g.scalar_int(c.pad, "pad")})})},
                          {{"to", int64_t(7)}});  // INT64
  const Value count = g.op("CumSum", {real, g.scalar_int(1, "axis")});
  return g.op("Add", {g.op("Mul", {count, real}), g.scalar_int(c.pad, "pad")});  // [b, seq]
}

}  // namespace

void export_bert_onnx(Model& model, const ExportOptions&, ExportGraphs& graphs) {
  GraphBuilder& g = graphs.add(model.config().model_type());
  const bool roberta = model.config().model_type() == "roberta";
  const BertConfig c(model.config(), roberta);
  const int64_t d = c.hidden / c.heads;
  const Task task = model.task();
  const Dims tokens = {"batch", "sequence"};

  const Value ids = g.input("input_ids", DType::i64, tokens);
  const Value mask = g.input("attention_mask", DType::i64, tokens);
  const Value types = roberta ? Value() : g.input("token_type_ids", DType::i64, tokens);

  Value h;  // [batch, sequence, hidden]
  const Value word = weight(g, model, "embed.word.weight");
  {
    GraphBuilder::Scope scope(g, "embed");
    const Value type_table = weight(g, model, "embed.token_type.weight");
    const Value type_embedding = types.defined()
                                     ? g.op("Gather", {type_table, types})
                                     : g.op("Gather", {type_table, g.scalar_int(0, "type")});
    h = g.op("Add", {g.op("Add", {g.op("Gather", {word, ids}),
                                  g.op("Gather", {weight(g, model, "embed.position.weight"),
                                                  positions(g, c, ids)})}),
                     type_embedding});
    h = layer_norm(g, h, model, "embed.norm", c.eps);
  }
  const AttentionMask padding = attention_mask(g, mask, ids, /*causal=*/false);
  for (int64_t i = 0; i < c.layers; ++i) {  // post-LN
    const std::string layer = "layers." + std::to_string(i);
    GraphBuilder::Scope scope(g, layer);
    const Qkv qkv = self_attention_qkv(g, h, model, layer + ".attention", c.heads, c.heads, d);
    const Value o = attend(g, qkv.q, qkv.k, qkv.v, &padding, 1.0 / std::sqrt(double(d)));
    h = g.op("Add", {h, linear(g, merge_heads(g, o, c.heads, d), model, layer + ".attention.out")});
    h = layer_norm(g, h, model, layer + ".attention_norm", c.eps);
    h = g.op("Add", {h, mlp(g, h, model, layer + ".mlp", c.activation)});
    h = layer_norm(g, h, model, layer + ".mlp_norm", c.eps);
  }

  GraphBuilder::Scope scope(g, "head");
  const Value first = g.op("Gather", {h, g.scalar_int(0, "first")}, {{"axis", 1}});  // [b, hidden]
  auto pooler = [&] { return g.op("Tanh", {linear(g, first, model, "pooler")}); };
  auto mlm_logits = [&] {
    // RoBERTa's LM head always uses exact gelu; BERT's uses hidden_act (bert.cc).
    const Activation act = roberta ? Activation::gelu : c.activation;
    const Value t = layer_norm(g, activation(g, act, linear(g, h, model, "mlm.dense")), model,
                               "mlm.norm", c.eps);
    return g.op("Add", {matmul_transposed(g, t, word), weight(g, model, "mlm.output.bias")});
  };
  switch (task) {
    case Task::encoder:
      g.output(h, "last_hidden_state", DType::f32, {"batch", "sequence", c.hidden});
      if (model.find_parameter("pooler.weight"))
        g.output(pooler(), "pooler_output", DType::f32, {"batch", c.hidden});
      return;
    case Task::masked_lm:
      g.output(mlm_logits(), "logits", DType::f32, {"batch", "sequence", c.vocab});
      return;
    case Task::sequence_classification: {
      const Value x =
          roberta ? g.op("Tanh", {linear(g, first, model, "classifier.dense")}) : pooler();
      g.output(linear(g, x, model, "classifier.out"), "logits", DType::f32, {"batch", c.labels});
      return;
    }
    case Task::pretraining:
      g.output(mlm_logits(), "prediction_logits", DType::f32, {"batch", "sequence", c.vocab});
      g.output(linear(g, pooler(), model, "nsp"), "seq_relationship_logits", DType::f32,
               {"batch", 2});
      return;
    default:
      LIBAI_THROW(Unsupported, model.config().path(), ": the ", c.name(), " head \"",
                  model.config().architecture(), "\" has no ONNX export");
  }
}

}  // namespace libai::models
