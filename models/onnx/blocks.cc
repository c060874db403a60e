#include "models/onnx/blocks.h"

#include <cmath>
#include <limits>

#include "ops/ops.h"

namespace libai::models::onnx {

const Tensor& parameter(Module& model, const std::string& name) {
  Tensor* t = model.find_parameter(name);
  LIBAI_CHECK_KIND(InternalError, t != nullptr, "onnx export: the model has no parameter \"", name,
                   "\"");
  return *t;
}

Value weight(GraphBuilder& g, Module& model, const std::string& name) {
  return g.initializer(name, parameter(model, name));
}

Value linear(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix) {
  const Tensor& w = parameter(model, prefix + ".weight");  // [out, in]
  Value y = g.op("MatMul", {x, g.initializer(prefix + ".weight",
                                             ops::contiguous(ops::transpose(w.detach(), 0, 1)))});
  if (model.find_parameter(prefix + ".bias"))
    y = g.op("Add", {y, weight(g, model, prefix + ".bias")});
  return y;
}

Value matmul_transposed(GraphBuilder& g, const Value& x, const Value& table) {
  return g.op("MatMul", {x, g.op("Transpose", {table}, {{"perm", std::vector<int64_t>{1, 0}}})});
}

Value layer_norm(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix,
                 double eps) {
  GraphBuilder::Scope scope(g, prefix);
  const Value w = weight(g, model, prefix + ".weight");
  const bool has_bias = model.find_parameter(prefix + ".bias") != nullptr;
  const Value b = has_bias ? weight(g, model, prefix + ".bias") : Value();
  if (g.opset() >= 17)
    return g.op("LayerNormalization",
                has_bias ? std::vector<Value>{x, w, b} : std::vector<Value>{x, w},
                {{"axis", -1}, {"epsilon", eps}});
  const Attributes last = {{"axes", std::vector<int64_t>{-1}}, {"keepdims", 1}};
  const Value centred = g.op("Sub", {x, g.op("ReduceMean", {x}, last)});
  const Value variance = g.op("ReduceMean", {g.op("Mul", {centred, centred})}, last);
  Value y =
      g.op("Div", {centred, g.op("Sqrt", {g.op("Add", {variance, g.scalar(float(eps), "eps")})})});
  y = g.op("Mul", {y, w});
  return has_bias ? g.op("Add", {y, b}) : y;
}

Value rms_norm(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix,
               double eps) {
  GraphBuilder::Scope scope(g, prefix);
  const Value w = weight(g, model, prefix + ".weight");
  const Value mean_square = g.op("ReduceMean", {g.op("Mul", {x, x})},
                                 {{"axes", std::vector<int64_t>{-1}}, {"keepdims", 1}});
  const Value rms = g.op("Sqrt", {g.op("Add", {mean_square, g.scalar(float(eps), "eps")})});
  return g.op("Mul", {g.op("Div", {x, rms}), w});
}

Value activation(GraphBuilder& g, Activation act, const Value& x) {
  switch (act) {
    case Activation::relu: return g.op("Relu", {x});
    case Activation::tanh: return g.op("Tanh", {x});
    case Activation::silu: return g.op("Mul", {x, g.op("Sigmoid", {x})});
    case Activation::quick_gelu:
      return g.op("Mul", {x, g.op("Sigmoid", {g.op("Mul", {x, g.scalar(1.702f, "quick_gelu")})})});
    case Activation::gelu: {  // x / 2 (1 + erf(x / sqrt 2))
      const Value erf = g.op("Erf", {g.op("Mul", {x, g.scalar(float(M_SQRT1_2), "inv_sqrt2")})});
      return g.op("Mul", {g.op("Mul", {x, g.scalar(0.5f, "half")}),
                          g.op("Add", {erf, g.scalar(1.0f, "one")})});
    }
    case Activation::gelu_tanh: {  // x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715 x³)))
      const Value cube = g.op("Mul", {g.op("Mul", {x, x}), x});
      const Value inner = g.op("Add", {x, g.op("Mul", {cube, g.scalar(0.044715f, "gelu_c")})});
      const Value t = g.op(
          "Tanh", {g.op("Mul", {inner, g.scalar(float(std::sqrt(2.0 / M_PI)), "sqrt_2_over_pi")})});
      return g.op("Mul", {g.op("Mul", {x, g.scalar(0.5f, "half")}),
                          g.op("Add", {t, g.scalar(1.0f, "one")})});
    }
  }
  LIBAI_THROW(InternalError, "onnx export: unknown activation");
}

Value mlp(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix, Activation act,
          bool gated) {
  GraphBuilder::Scope scope(g, prefix);
  Value h = gated ? g.op("Mul", {activation(g, act, linear(g, x, model, prefix + ".gate")),
                                 linear(g, x, model, prefix + ".up")})
                  : activation(g, act, linear(g, x, model, prefix + ".up"));
  return linear(g, h, model, prefix + ".down");
}

Value split_heads(GraphBuilder& g, const Value& x, int64_t heads, int64_t head_dim) {
  const Value y = g.op("Reshape", {x, g.ints({0, 0, heads, head_dim}, "shape")});
  return g.op("Transpose", {y}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
}

Value merge_heads(GraphBuilder& g, const Value& x, int64_t heads, int64_t head_dim) {
  const Value y = g.op("Transpose", {x}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  return g.op("Reshape", {y, g.ints({0, 0, heads * head_dim}, "shape")});
}

Qkv self_attention_qkv(GraphBuilder& g, const Value& x, Module& model, const std::string& prefix,
                       int64_t heads, int64_t kv_heads, int64_t head_dim) {
  GraphBuilder::Scope scope(g, prefix);
  const int64_t group = heads / kv_heads;
  // [b, s, kv, group + 2, d]: each key/value head's queries, then its key and value.
  const Value y = g.op("Reshape", {linear(g, x, model, prefix + ".qkv"),
                                   g.ints({0, 0, kv_heads, group + 2, head_dim}, "shape")});
  const auto parts = g.op_n("Split", {y, g.ints({group, 1, 1}, "split")}, 3, {{"axis", 3}});
  const std::vector<int64_t> perm{0, 2, 1, 3};
  auto heads_first = [&](const Value& part, int64_t n) {
    const Value r = g.op("Reshape", {part, g.ints({0, 0, n, head_dim}, "shape")});
    return g.op("Transpose", {r}, {{"perm", perm}});
  };
  return {heads_first(parts[0], heads), heads_first(parts[1], kv_heads),
          heads_first(parts[2], kv_heads)};
}

Value repeat_kv(GraphBuilder& g, const Value& x, int64_t heads, int64_t kv_heads,
                int64_t head_dim) {
  if (heads == kv_heads) return x;
  const Value wide = g.op("Expand", {g.op("Unsqueeze", {x, g.ints({2}, "axes")}),
                                     g.ints({1, 1, heads / kv_heads, 1, 1}, "repeat")});
  return g.op("Reshape", {wide, g.ints({0, heads, -1, head_dim}, "shape")});
}

Rotary rotary_cos_sin(GraphBuilder& g, const Value& positions, const Value& inv_freq) {
  GraphBuilder::Scope scope(g, "rotary");
  const Value p = g.op("Unsqueeze", {g.op("Cast", {positions}, {{"to", int64_t(1)}}),  // FLOAT
                                     g.ints({-1}, "axes")});                            // [b, s, 1]
  const Value half = g.op("Mul", {p, inv_freq});                         // [b, s, dim / 2]
  const Value angles = g.op("Unsqueeze", {g.op("Concat", {half, half}, {{"axis", -1}}),
                                          g.ints({1}, "axes")});         // [b, 1, s, dim]
  return {g.op("Cos", {angles}), g.op("Sin", {angles})};
}

Value rotate(GraphBuilder& g, const Value& x, const Rotary& rotary, int64_t dim) {
  GraphBuilder::Scope scope(g, "rotate");
  const auto halves = g.op_n("Split", {x, g.ints({dim / 2, dim / 2}, "split")}, 2, {{"axis", 3}});
  const Value rotated = g.op("Concat", {g.op("Neg", {halves[1]}), halves[0]}, {{"axis", 3}});
  return g.op("Add", {g.op("Mul", {x, rotary.cos}), g.op("Mul", {rotated, rotary.sin})});
}

Value dim_of(GraphBuilder& g, const Value& x, int64_t axis) {
  return g.op("Gather", {g.op("Shape", {x}), g.ints({axis}, "axis")}, {{"axis", 0}});
}

namespace {

Value to_scalar(GraphBuilder& g, const Value& one) {
  return g.op("Squeeze", {one, g.ints({0}, "axes")});
}

}  // namespace

AttentionMask attention_mask(GraphBuilder& g, const Value& keep, const Value& queries, bool causal,
                             const Value& key_length) {
  GraphBuilder::Scope scope(g, "mask");
  Value allowed;  // bool, broadcastable to [b, 1, s, t]
  if (keep.defined())
    allowed = g.op("Unsqueeze", {g.op("Cast", {keep}, {{"to", int64_t(9)}}),  // BOOL
                                 g.ints({1, 2}, "axes")});
  if (causal) {
    const Value s = dim_of(g, queries, 1);
    const Value t = keep.defined() ? dim_of(g, keep, 1) : key_length.defined() ? key_length : s;
    const Value zero = g.scalar_int(0, "zero"), one = g.scalar_int(1, "one");
    // Query i (of s, after t - s cached keys) sees keys j <= i + t - s.
    const Value rows = g.op(
        "Add", {g.op("Range", {zero, to_scalar(g, s), one}), to_scalar(g, g.op("Sub", {t, s}))});
    const Value cols = g.op("Range", {zero, to_scalar(g, t), one});
    const Value visible = g.op("LessOrEqual", {g.op("Unsqueeze", {cols, g.ints({0}, "axes")}),
                                               g.op("Unsqueeze", {rows, g.ints({1}, "axes")})});
    allowed = allowed.defined() ? g.op("And", {allowed, visible}) : visible;
  }
  if (!allowed.defined()) return {};
  AttentionMask mask;
  mask.bias = g.op("Where", {allowed, g.scalar(0.0f, "zero_f"),
                             g.scalar(std::numeric_limits<float>::lowest(), "lowest")});
  mask.rows = g.op("ReduceMax", {g.op("Cast", {allowed}, {{"to", int64_t(1)}})},  // FLOAT
                   {{"axes", std::vector<int64_t>{-1}}, {"keepdims", 1}});
  return mask;
}

Value attend(GraphBuilder& g, const Value& q, const Value& k, const Value& v,
             const AttentionMask* mask, double scale, const Value& additive) {
  GraphBuilder::Scope scope(g, "attend");
  const Value kt = g.op("Transpose", {k}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});
  Value scores = g.op("Mul", {g.op("MatMul", {q, kt}), g.scalar(float(scale), "scale")});
  if (additive.defined()) scores = g.op("Add", {scores, additive});
  if (mask && mask->bias.defined()) scores = g.op("Add", {scores, mask->bias});
  Value probs = g.op("Softmax", {scores}, {{"axis", -1}});
  if (mask && mask->rows.defined()) probs = g.op("Mul", {probs, mask->rows});
  return g.op("MatMul", {probs, v});
}

}  // namespace libai::models::onnx
