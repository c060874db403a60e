// T5's and MT5's ONNX graphs (models/onnx/export.h), the same computation as t5.cc, in the
// shape of Hugging Face optimum's seq2seq exports (encoder_model.onnx, decoder_model.onnx,
// decoder_with_past_model.onnx), named from the --out file: t5.onnx ->
//
//   t5_encoder.onnx:  input_ids, attention_mask [batch, encoder_sequence] i64
//                     -> last_hidden_state [batch, encoder_sequence, d_model]
//   t5_decoder.onnx:  input_ids [batch, decoder_sequence] i64 (the decoder's tokens),
//                     encoder_attention_mask [batch, encoder_sequence] i64,
//                     encoder_hidden_states [batch, encoder_sequence, d_model]
//                     -> logits [batch, decoder_sequence, vocab]
//                     (--with-past) and present.{i}.decoder.key / .value [batch, heads,
//                     decoder_sequence, d_kv], present.{i}.encoder.key / .value [batch, heads,
//                     encoder_sequence, d_kv]: the first step of cached decoding
//   t5_decoder_with_past.onnx (--with-past): input_ids, encoder_attention_mask,
//                     past_key_values.{i}.decoder.key / .value [batch, heads,
//                     past_decoder_sequence, d_kv], past_key_values.{i}.encoder.key / .value
//                     -> logits, present.{i}.decoder.key / .value [batch, heads,
//                     past_decoder_sequence + decoder_sequence, d_kv] (the cross-attention
//                     keys and values do not change, so they are not returned again)
//
// The decoder is causal without a decoder mask (optimum's interface; generation pads nothing
// on the decoder side). Relative position bias: the graph takes key - query for queries at
// past_decoder_sequence + i over keys 0 .. past + sequence - 1 (0 .. sequence - 1 in the
// encoder), clipped to [-max_distance, max_distance], and looks the bucket up in a table of
// those 2 max_distance + 1 buckets made by t5_relative_position_bucket (the runtime's function:
// Hugging Face's float32 logarithm rounds the bucket edges, and a table keeps that bit-exact;
// beyond max_distance every bucket is the last, which the export checks).
#include <cmath>

#include "models/onnx/blocks.h"
#include "models/onnx/export.h"
#include "models/t5/t5.h"

namespace libai::models {

namespace {

using namespace onnx;

// [1, heads, s, t] bias of the stack `prefix` for queries at `past` + i over keys 0 .. t - 1.
Value relative_bias(GraphBuilder& g, Module& model, const T5Config& c, const std::string& prefix,
                    bool decoder, const Value& queries, const Value& past, const Value& keys) {
  GraphBuilder::Scope scope(g, prefix + ".relative_bias");
  const int64_t m = c.max_distance;
  std::vector<int64_t> buckets;
  for (int64_t r = -m; r <= m; ++r)
    buckets.push_back(t5_relative_position_bucket(r, !decoder, c.num_buckets, m));
  for (int64_t far : {m + 1, 4 * m + 7})
    LIBAI_CHECK_KIND(InternalError,
                     t5_relative_position_bucket(far, !decoder, c.num_buckets, m) == buckets.back() &&
                         t5_relative_position_bucket(-far, !decoder, c.num_buckets, m) ==
                             buckets.front(),
                     "onnx export: T5's relative position buckets do not saturate at ",
                     "max_distance ", m);
  auto scalar_of = [&](const Value& v) { return g.op("Squeeze", {v, g.ints({0}, "axes")}); };
  const Value zero = g.scalar_int(0, "zero"), one = g.scalar_int(1, "one");
  const Value start = scalar_of(past);
  const Value q = g.op("Range", {start, g.op("Add", {start, scalar_of(dim_of(g, queries, 1))}), one});
  const Value k = g.op("Range", {zero, scalar_of(keys), one});
  const Value relative = g.op("Sub", {g.op("Unsqueeze", {k, g.ints({0}, "axes")}),
                                      g.op("Unsqueeze", {q, g.ints({1}, "axes")})});  // [s, t]
  const Value clipped = g.op("Min", {g.op("Max", {relative, g.scalar_int(-m, "low")}),
                                     g.scalar_int(m, "high")});
  const Value table = g.initializer(prefix + ".relative_bias.buckets",
                                    Tensor::from_vector(buckets, {int64_t(buckets.size())}));
  const Value bucket = g.op("Gather", {table, g.op("Add", {clipped, g.scalar_int(m, "offset")})});
  const Value values = g.op("Gather", {weight(g, model, prefix + ".relative_bias.weight"), bucket});
  return g.op("Unsqueeze", {g.op("Transpose", {values}, {{"perm", std::vector<int64_t>{2, 0, 1}}}),
                            g.ints({0}, "axes")});  // [1, heads, s, t]
}

// [b, t, heads * 2 * d] (Note [Fused q/k/v by head]: k, v per head) -> k, v [b, heads, t, d].
std::pair<Value, Value> cross_kv(GraphBuilder& g, Module& model, const T5Config& c,
                                 const std::string& prefix, const Value& memory) {
  GraphBuilder::Scope scope(g, prefix);
  const Value y = g.op("Reshape", {linear(g, memory, model, prefix + ".kv"),
                                   g.ints({0, 0, c.heads, 2, c.d_kv}, "shape")});
  const auto parts = g.op_n("Split", {y, g.ints({1, 1}, "split")}, 2, {{"axis", 3}});
  auto heads_first = [&](const Value& part) {
    const Value r = g.op("Reshape", {part, g.ints({0, 0, c.heads, c.d_kv}, "shape")});
    return g.op("Transpose", {r}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  };
  return {heads_first(parts[0]), heads_first(parts[1])};
}

void encoder_graph(GraphBuilder& g, Module& model, const T5Config& c) {
  const Dims tokens = {"batch", "encoder_sequence"};
  const Value ids = g.input("input_ids", DType::i64, tokens);
  const Value mask = g.input("attention_mask", DType::i64, tokens);
  Value h = g.op("Gather", {weight(g, model, "shared.weight"), ids});
  const AttentionMask padding = attention_mask(g, mask, ids, /*causal=*/false);
  const Value bias =
      relative_bias(g, model, c, "encoder", false, ids, g.ints({0}, "no_past"), dim_of(g, ids, 1));
  for (int64_t i = 0; i < c.encoder_layers; ++i) {
    const std::string layer = "encoder.layers." + std::to_string(i);
    GraphBuilder::Scope scope(g, layer);
    const Value x = rms_norm(g, h, model, layer + ".attention_norm", c.eps);
    const Qkv qkv = self_attention_qkv(g, x, model, layer + ".attention", c.heads, c.heads, c.d_kv);
    const Value o = attend(g, qkv.q, qkv.k, qkv.v, &padding, 1.0, bias);
    h = g.op("Add", {h, linear(g, merge_heads(g, o, c.heads, c.d_kv), model,
                               layer + ".attention.out")});
    const Value y = rms_norm(g, h, model, layer + ".mlp_norm", c.eps);
    h = g.op("Add", {h, mlp(g, y, model, layer + ".mlp", c.activation, c.gated)});
  }
  h = rms_norm(g, h, model, "encoder.final_norm", c.eps);
  g.output(h, "last_hidden_state", DType::f32, {"batch", "encoder_sequence", c.d_model});
}

// The decoder: `with_past` takes the caches as inputs; `presents` returns them.
void decoder_graph(GraphBuilder& g, Module& model, const T5Config& c, bool with_past,
                   bool presents) {
  const Value ids = g.input("input_ids", DType::i64, {"batch", "decoder_sequence"});
  const Value memory_mask =
      g.input("encoder_attention_mask", DType::i64, {"batch", "encoder_sequence"});
  const Dim total = with_past ? "past_decoder_sequence + decoder_sequence" : "decoder_sequence";
  const Dims self_past = {"batch", c.heads, "past_decoder_sequence", c.d_kv},
             cross = {"batch", c.heads, "encoder_sequence", c.d_kv};
  Value memory;
  std::vector<Value> past_keys, past_values, cross_keys, cross_values;
  if (!with_past) {
    memory = g.input("encoder_hidden_states", DType::f32, {"batch", "encoder_sequence", c.d_model});
  } else {
    for (int64_t i = 0; i < c.decoder_layers; ++i) {
      const std::string name = "past_key_values." + std::to_string(i);
      past_keys.push_back(g.input(name + ".decoder.key", DType::f32, self_past));
      past_values.push_back(g.input(name + ".decoder.value", DType::f32, self_past));
      cross_keys.push_back(g.input(name + ".encoder.key", DType::f32, cross));
      cross_values.push_back(g.input(name + ".encoder.value", DType::f32, cross));
    }
  }
  const Value shared = weight(g, model, "shared.weight");
  Value h = g.op("Gather", {shared, ids});
  const Value past = with_past ? dim_of(g, past_keys[0], 2) : g.ints({0}, "no_past");
  const Value keys = g.op("Add", {past, dim_of(g, ids, 1)});
  const AttentionMask causal = attention_mask(g, Value(), ids, /*causal=*/true, keys);
  const AttentionMask memory_padding = attention_mask(g, memory_mask, ids, /*causal=*/false);
  const Value bias = relative_bias(g, model, c, "decoder", true, ids, past, keys);

  std::vector<std::pair<std::string, Value>> outputs;
  for (int64_t i = 0; i < c.decoder_layers; ++i) {
    const std::string layer = "decoder.layers." + std::to_string(i), n = std::to_string(i);
    GraphBuilder::Scope scope(g, layer);
    const Value x = rms_norm(g, h, model, layer + ".attention_norm", c.eps);
    Qkv qkv = self_attention_qkv(g, x, model, layer + ".attention", c.heads, c.heads, c.d_kv);
    if (with_past) {
      qkv.k = g.op("Concat", {past_keys[size_t(i)], qkv.k}, {{"axis", 2}});
      qkv.v = g.op("Concat", {past_values[size_t(i)], qkv.v}, {{"axis", 2}});
    }
    Value o = attend(g, qkv.q, qkv.k, qkv.v, &causal, 1.0, bias);
    h = g.op("Add", {h, linear(g, merge_heads(g, o, c.heads, c.d_kv), model,
                               layer + ".attention.out")});

    const Value y = rms_norm(g, h, model, layer + ".cross_attention_norm", c.eps);
    const Value q = split_heads(g, linear(g, y, model, layer + ".cross_attention.q"), c.heads, c.d_kv);
    auto [k, v] = with_past ? std::pair{cross_keys[size_t(i)], cross_values[size_t(i)]}
                            : cross_kv(g, model, c, layer + ".cross_attention", memory);
    o = attend(g, q, k, v, &memory_padding, 1.0);
    h = g.op("Add", {h, linear(g, merge_heads(g, o, c.heads, c.d_kv), model,
                               layer + ".cross_attention.out")});

    const Value z = rms_norm(g, h, model, layer + ".mlp_norm", c.eps);
    h = g.op("Add", {h, mlp(g, z, model, layer + ".mlp", c.activation, c.gated)});
    if (presents) {
      outputs.emplace_back("present." + n + ".decoder.key", qkv.k);
      outputs.emplace_back("present." + n + ".decoder.value", qkv.v);
      if (!with_past) {
        outputs.emplace_back("present." + n + ".encoder.key", k);
        outputs.emplace_back("present." + n + ".encoder.value", v);
      }
    }
  }
  h = rms_norm(g, h, model, "decoder.final_norm", c.eps);
  // Note [T5 head scaling and tying] in t5.h.
  if (c.scale_output) h = g.op("Mul", {h, g.scalar(float(1.0 / std::sqrt(double(c.d_model))), "scale")});
  const Value head = c.tied ? shared : weight(g, model, "lm_head.weight");  // [vocab, d_model]
  g.output(matmul_transposed(g, h, head), "logits", DType::f32,
           {"batch", "decoder_sequence", c.vocab});
  for (const auto& [name, value] : outputs) {
    const bool self = name.find(".decoder.") != std::string::npos;
    g.output(value, name, DType::f32,
             self ? Dims{"batch", c.heads, total, c.d_kv} : cross);
  }
}

}  // namespace

void export_t5_onnx(Model& model, const ExportOptions& options, ExportGraphs& graphs) {
  const bool mt5 = model.config().model_type() == "mt5";
  const T5Config c(model.config(), mt5);
  encoder_graph(graphs.add(c.name + "_encoder", "_encoder"), model, c);
  decoder_graph(graphs.add(c.name + "_decoder", "_decoder"), model, c, /*with_past=*/false,
                /*presents=*/options.with_past);
  if (options.with_past)
    decoder_graph(graphs.add(c.name + "_decoder_with_past", "_decoder_with_past"), model, c,
                  /*with_past=*/true, /*presents=*/true);
}

}  // namespace libai::models
