// GPT-2's ONNX graph (models/onnx/export.h), the same computation as gpt2.cc:
//
//   in:  input_ids [batch, sequence] i64, attention_mask [batch, past_sequence + sequence] i64
//        (with past) past_key_values.{i}.key / .value [batch, heads, past_sequence, head_dim]
//   out: logits [batch, sequence, vocab]
//        (with past) present.{i}.key / .value [batch, heads, past_sequence + sequence, head_dim]
//
// Positions are past_sequence, past_sequence + 1, ... as in the runtime's forward and decode
// step (not derived from the mask); a prefill runs with past_sequence = 0.
#include <cmath>

#include "models/gpt2/gpt2.h"
#include "models/onnx/blocks.h"
#include "models/onnx/export.h"

namespace libai::models {

void export_gpt2_onnx(Model& model, const onnx::ExportOptions& options, onnx::ExportGraphs& graphs) {
  using namespace onnx;
  GraphBuilder& g = graphs.add("gpt2");
  const Gpt2Config c(model.config());
  const int64_t d = c.hidden / c.heads;
  const bool past = options.with_past;
  const Dim total = past ? "past_sequence + sequence" : "sequence";

  const Value ids = g.input("input_ids", DType::i64, {"batch", "sequence"});
  const Value mask = g.input("attention_mask", DType::i64, {"batch", total});
  std::vector<Value> past_keys, past_values;
  for (int64_t i = 0; past && i < c.layers; ++i) {
    const std::string name = "past_key_values." + std::to_string(i);
    past_keys.push_back(g.input(name + ".key", DType::f32, {"batch", c.heads, "past_sequence", d}));
    past_values.push_back(
        g.input(name + ".value", DType::f32, {"batch", c.heads, "past_sequence", d}));
  }

  Value h;  // [batch, sequence, hidden]
  const Value wte = weight(g, model, "embed.weight");
  {
    GraphBuilder::Scope scope(g, "embed");
    const Value start = past ? dim_of(g, past_keys[0], 2) : g.ints({0}, "start");
    const Value end = g.op("Add", {start, dim_of(g, ids, 1)});
    auto scalar_of = [&](const Value& v) { return g.op("Squeeze", {v, g.ints({0}, "axes")}); };
    const Value positions =
        g.op("Range", {scalar_of(start), scalar_of(end), g.scalar_int(1, "step")});  // [sequence]
    h = g.op("Add", {g.op("Gather", {wte, ids}),
                     g.op("Gather", {weight(g, model, "positions.weight"), positions})});
  }
  const AttentionMask causal = attention_mask(g, mask, ids, /*causal=*/true);

  std::vector<std::pair<std::string, Value>> presents;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string layer = "layers." + std::to_string(i);
    GraphBuilder::Scope scope(g, layer);
    const Value x = layer_norm(g, h, model, layer + ".attention_norm", c.eps);
    Qkv qkv = self_attention_qkv(g, x, model, layer + ".attention", c.heads, c.heads, d);
    if (past) {
      qkv.k = g.op("Concat", {past_keys[size_t(i)], qkv.k}, {{"axis", 2}});
      qkv.v = g.op("Concat", {past_values[size_t(i)], qkv.v}, {{"axis", 2}});
      presents.emplace_back("present." + std::to_string(i) + ".key", qkv.k);
      presents.emplace_back("present." + std::to_string(i) + ".value", qkv.v);
    }
    const Value o = attend(g, qkv.q, qkv.k, qkv.v, &causal, 1.0 / std::sqrt(double(d)));
    h = g.op("Add", {h, linear(g, merge_heads(g, o, c.heads, d), model, layer + ".attention.out")});
    const Value y = layer_norm(g, h, model, layer + ".mlp_norm", c.eps);
    h = g.op("Add", {h, mlp(g, y, model, layer + ".mlp", c.activation)});
  }
  h = layer_norm(g, h, model, "final_norm", c.eps);
  g.output(matmul_transposed(g, h, wte), "logits", DType::f32, {"batch", "sequence", c.vocab});
  for (const auto& [name, value] : presents)
    g.output(value, name, DType::f32, {"batch", c.heads, total, d});
}

}  // namespace libai::models
