// The ONNX graph of the Llama family (llama, mistral, qwen2; models/onnx/export.h), the same
// computation as llama.cc, with GPT-2's interface (models/gpt2/gpt2_onnx.cc) plus positions:
//
//   in:  input_ids [batch, sequence] i64, attention_mask [batch, past_sequence + sequence] i64,
//        position_ids [batch, sequence] i64 (optional: Note [Optional position_ids])
//        (with past) past_key_values.{i}.key / .value [batch, kv_heads, past_sequence, head_dim]
//   out: logits [batch, sequence, vocab]
//        (with past) present.{i}.key / .value [batch, kv_heads, past_sequence + sequence, head_dim]
//
// The cache holds keys after the rotation, by key/value head (grouped-query attention repeats
// them for the query heads inside the graph), as the runtime's KVCache does.
//
// Rotary frequencies: the default, linear and llama3 types do not depend on the input, so
// their inverse frequencies are an initializer computed by RopeConfig::inverse_frequencies
// (the runtime's own numbers). The dynamic type's base grows with the longest position
// (longest = max(position_ids) + 1 over the batch, as RopeConfig::cos_sin takes it), so the
// graph computes it: base = theta (factor longest / max_positions - (factor - 1))^(dim /
// (dim - 2)) when longest > max_positions, else theta; inv_freq = 1 / base^(2i / dim).
//
// Mistral's sliding window is not in the graph: the runtime refuses sequences longer than
// sliding_window, and within it the window changes nothing.
//
// Note [Optional position_ids]: Hugging Face numbers positions 0, 1, ... (after the past) unless
// position_ids is given (generate gives them from the mask under left padding). The input has
// an overridable initializer of shape [1, 0] as its default; the graph concatenates the
// flattened given positions (0 or batch * sequence of them) with the default numbering
// past_sequence + j and keeps the first batch * sequence, so the given ones win when fed.
// ONNX has no cheaper way to branch on an omitted input without a subgraph.
#include <cmath>

#include "models/llama/llama.h"
#include "models/onnx/blocks.h"
#include "models/onnx/export.h"

namespace libai::models {

namespace {

using namespace onnx;

// Note [Optional position_ids]: [batch, sequence] positions, given or past + j.
Value positions_of(GraphBuilder& g, const Value& given, const Value& ids, const Value& past) {
  GraphBuilder::Scope scope(g, "positions");
  auto scalar_of = [&](const Value& v) { return g.op("Squeeze", {v, g.ints({0}, "axes")}); };
  const Value shape = g.op("Shape", {ids});
  const Value start = scalar_of(past);
  const Value end = g.op("Add", {start, scalar_of(dim_of(g, ids, 1))});
  const Value row = g.op("Range", {start, end, g.scalar_int(1, "step")});  // [sequence]
  const Value numbered = g.op("Expand", {g.op("Unsqueeze", {row, g.ints({0}, "axes")}), shape});
  const Value flat = g.ints({-1}, "flat");
  const Value both = g.op("Concat", {g.op("Reshape", {given, flat}), g.op("Reshape", {numbered, flat})},
                          {{"axis", 0}});
  const Value count = g.op("ReduceProd", {shape}, {{"keepdims", 1}});  // [1]: batch * sequence
  const Value first = g.op("Slice", {both, g.ints({0}, "start"), count, g.ints({0}, "axes")});
  return g.op("Reshape", {first, shape});
}

// The inverse frequencies [head_dim / 2] for these positions (see the header comment).
Value inverse_frequencies(GraphBuilder& g, const RopeConfig& rope, const Value& positions) {
  GraphBuilder::Scope scope(g, "rotary");
  if (rope.type != RopeConfig::Type::dynamic) {
    const auto inv = rope.inverse_frequencies(0);
    return g.initializer("rotary.inv_freq", Tensor::from_vector(inv, {int64_t(inv.size())}));
  }
  std::vector<float> exponents(size_t(rope.dim / 2));
  for (int64_t i = 0; i < rope.dim / 2; ++i)
    exponents[size_t(i)] = float(2 * i) / float(rope.dim);
  const Value longest = g.op("Add", {g.op("Cast", {g.op("ReduceMax", {positions}, {{"keepdims", 0}})},
                                          {{"to", int64_t(1)}}),  // FLOAT
                                     g.scalar(1.0f, "one")});
  const Value max_positions = g.scalar(float(rope.max_positions), "max_positions");
  const Value grown = g.op(
      "Mul", {g.scalar(float(rope.theta), "theta"),
              g.op("Pow", {g.op("Sub", {g.op("Div", {g.op("Mul", {g.scalar(float(rope.factor), "factor"), longest}),
                                                     max_positions}),
                                        g.scalar(float(rope.factor - 1), "factor_less_one")}),
                           g.scalar(float(rope.dim) / float(rope.dim - 2), "exponent")})});
  const Value base = g.op("Where", {g.op("Greater", {longest, max_positions}), grown,
                                    g.scalar(float(rope.theta), "theta")});
  const Value powers = g.op(
      "Pow", {base, g.initializer("rotary.exponents",
                                  Tensor::from_vector(exponents, {int64_t(exponents.size())}))});
  return g.op("Reciprocal", {powers});
}

}  // namespace

void export_llama_onnx(Model& model, const ExportOptions& options, ExportGraphs& graphs) {
  const LlamaConfig c(model.config());
  GraphBuilder& g = graphs.add(c.model_type);
  const int64_t d = c.head_dim;
  const bool past = options.with_past;
  const Dim total = past ? "past_sequence + sequence" : "sequence";

  const Value ids = g.input("input_ids", DType::i64, {"batch", "sequence"});
  const Value mask = g.input("attention_mask", DType::i64, {"batch", total});
  const Value given_positions =
      g.optional_input("position_ids", DType::i64, {"batch", "sequence"},
                       Tensor::from_vector(std::vector<int64_t>{}, {1, 0}));
  std::vector<Value> past_keys, past_values;
  for (int64_t i = 0; past && i < c.layers; ++i) {
    const std::string name = "past_key_values." + std::to_string(i);
    const Dims dims = {"batch", c.kv_heads, "past_sequence", d};
    past_keys.push_back(g.input(name + ".key", DType::f32, dims));
    past_values.push_back(g.input(name + ".value", DType::f32, dims));
  }

  const Value table = weight(g, model, "embed.weight");
  Value h = g.op("Gather", {table, ids});  // [batch, sequence, hidden]
  const Value positions = positions_of(g, given_positions, ids,
                                       past ? dim_of(g, past_keys[0], 2) : g.ints({0}, "no_past"));
  const Rotary rotary = rotary_cos_sin(g, positions, inverse_frequencies(g, c.rope, positions));
  const AttentionMask causal = attention_mask(g, mask, ids, /*causal=*/true);

  std::vector<std::pair<std::string, Value>> presents;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string layer = "layers." + std::to_string(i);
    GraphBuilder::Scope scope(g, layer);
    const Value x = rms_norm(g, h, model, layer + ".attention_norm", c.eps);
    Qkv qkv = self_attention_qkv(g, x, model, layer + ".attention", c.heads, c.kv_heads, d);
    qkv.q = rotate(g, qkv.q, rotary, d);
    qkv.k = rotate(g, qkv.k, rotary, d);
    if (past) {
      qkv.k = g.op("Concat", {past_keys[size_t(i)], qkv.k}, {{"axis", 2}});
      qkv.v = g.op("Concat", {past_values[size_t(i)], qkv.v}, {{"axis", 2}});
      presents.emplace_back("present." + std::to_string(i) + ".key", qkv.k);
      presents.emplace_back("present." + std::to_string(i) + ".value", qkv.v);
    }
    const Value o = attend(g, qkv.q, repeat_kv(g, qkv.k, c.heads, c.kv_heads, d),
                           repeat_kv(g, qkv.v, c.heads, c.kv_heads, d), &causal,
                           1.0 / std::sqrt(double(d)));
    h = g.op("Add", {h, linear(g, merge_heads(g, o, c.heads, d), model, layer + ".attention.out")});
    const Value y = rms_norm(g, h, model, layer + ".mlp_norm", c.eps);
    h = g.op("Add", {h, mlp(g, y, model, layer + ".mlp", c.activation, /*gated=*/true)});
  }
  h = rms_norm(g, h, model, "final_norm", c.eps);
  const Value head = c.tied ? table : weight(g, model, "lm_head.weight");  // [vocab, hidden]
  g.output(matmul_transposed(g, h, head), "logits", DType::f32, {"batch", "sequence", c.vocab});
  for (const auto& [name, value] : presents)
    g.output(value, name, DType::f32, {"batch", c.kv_heads, total, d});
}

}  // namespace libai::models
