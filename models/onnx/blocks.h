// The shared blocks of the exported graphs, the ONNX counterparts of models/layers/: each
// computes what the runtime's layer computes (same activation formula, norm epsilon, fused
// q/k/v layout, mask semantics), so a family's exporter reads like its model file.
//
//   Value h = layer_norm(g, x, model, "layers.0.attention_norm", 1e-5);    // [b, s, hidden]
//   auto [q, k, v] = self_attention_qkv(g, h, model, "layers.0.attention", heads, heads, d);
//   AttentionMask mask = attention_mask(g, keep, h, /*causal=*/true);
//   Value o = attend(g, q, k, v, &mask, 1 / sqrt(d));                        // [b, heads, s, d]
//   h = linear(g, merge_heads(g, o, heads * d), model, "layers.0.attention.out");
//
// Shapes in comments: b batch, s query positions, t key positions, H heads, d head_dim.
#pragma once

#include <optional>
#include <string>

#include "models/layers/linear.h"
#include "models/module.h"
#include "models/onnx/graph.h"

namespace libai::models::onnx {

// The loaded model's parameter of that name (InternalError when it has none: an exporter's
// mistake), as an initializer under the same name.
const Tensor& parameter(Module& model, const std::string& name);
Value weight(GraphBuilder& g, Module& model, const std::string& name);

// Our Linear `prefix` (.weight [out, in], optional .bias): x W^T + b over the last dim. The
// weight is written transposed ([in, out], MatMul's layout).
Value linear(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix);
// x tableᵀ for a [rows, dim] table (tied LM heads), without a second copy of the table.
Value matmul_transposed(GraphBuilder& g, const Value& x, const Value& table);

// LayerNorm `prefix` (.weight, optional .bias) over the last dim: LayerNormalization from
// opset 17, the same arithmetic in primitive ops before.
Value layer_norm(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix,
                 double eps);
// RMSNorm (.weight): x / sqrt(mean(x²) + eps) · weight, decomposed (no ONNX op at opset 17).
Value rms_norm(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix,
               double eps);

// The activation `act` as models/layers/linear.cc computes it (gelu: erf form; gelu_tanh:
// tanh form; quick_gelu: x sigmoid(1.702 x)).
Value activation(GraphBuilder& g, Activation act, const Value& x);

// Our Mlp `prefix` (up, down, optional gate): down(act(up(x))) or down(act(gate(x)) up(x)).
Value mlp(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix, Activation act,
          bool gated = false);

// [b, s, H d] -> [b, H, s, d] and back.
Value split_heads(GraphBuilder& g, const Value& x, int64_t heads, int64_t head_dim);
Value merge_heads(GraphBuilder& g, const Value& x, int64_t heads, int64_t head_dim);

// The self-attention projection of Attention `prefix` (.qkv, Note [Fused q/k/v by head] in
// models/layers/attention.h, grouped by key/value head): q [b, H, s, d], k and v
// [b, kv_heads, s, d].
struct Qkv {
  Value q, k, v;
};
Qkv self_attention_qkv(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix,
                       int64_t heads, int64_t kv_heads, int64_t head_dim);
// Grouped-query attention: [b, kv_heads, t, d] -> [b, heads, t, d], head h using kv head h / g.
Value repeat_kv(GraphBuilder& g, const Value& x, int64_t heads, int64_t kv_heads, int64_t head_dim);

// Which (query, key) pairs attend, as ops::scaled_dot_product_attention defines them:
// padding (keep [b, t], nonzero = attend; t counts cached keys) and causality (query i sees
// keys j <= i + t - s). `bias` [b or 1, 1, s, t] is 0 or the lowest f32; `rows` [b or 1, 1,
// s, 1] is 1 for a query with at least one key and 0 otherwise: the runtime gives a fully
// masked query zeros, not softmax's uniform average.
struct AttentionMask {
  Value bias, rows;
};
// `keep` may be undefined (no padding); `queries` is any [b, s, ...] value of the query length.
AttentionMask attention_mask(GraphBuilder& g, const Value& keep, const Value& queries, bool causal,
                             const Value& key_length = Value());

// softmax(q kᵀ scale + bias) v, with rows masked as above: q [b, H, s, d], k, v [b, H, t, d]
// -> [b, H, s, d]. `additive` (optional, broadcastable to [b, H, s, t]) is added before the
// mask (T5's relative-position bias).
Value attend(GraphBuilder& g, const Value& q, const Value& k, const Value& v,
             const AttentionMask* mask, double scale, const Value& additive = Value());

// Rotary position embeddings (Note [Rotary embeddings in attention] in models/layers/attention.h),
// as models/llama/llama.cc computes them: angle = f32(position) * inv_freq (f32, as Hugging
// Face), cos and sin of the angles repeated over both halves of the rotated features.
//   positions [b, s] i64, inv_freq [dim / 2] f32 -> cos, sin [b, 1, s, dim]
struct Rotary {
  Value cos, sin;
};
Rotary rotary_cos_sin(GraphBuilder& g, const Value& positions, const Value& inv_freq);
// x [b, H, s, dim] -> x cos + rotate_half(x) sin, rotate_half(x) = [-x[dim/2:], x[:dim/2]].
Value rotate(GraphBuilder& g, const Value& x, const Rotary& rotary, int64_t dim);

// Shape helpers: dim `axis` of x as a 1-element i64 tensor.
Value dim_of(GraphBuilder& g, const Value& x, int64_t axis);

}  // namespace libai::models::onnx
