// The basic parameterised layers: Linear, Embedding, LayerNorm, RMSNorm, and the activation
// functions that configs name ("gelu", "gelu_new", "relu", "silu", ...).
//
//   Linear proj(ctx, /*in=*/768, /*out=*/3072);          // weight [out, in] (torch layout), bias [out]
//   Tensor y = proj.forward(x);                          // [..., 768] -> [..., 3072]
//   Embedding wte(ctx, vocab, 768);  Tensor h = wte.forward(ids);   // ids [b, s] -> [b, s, 768]
//   Norm ln(ctx, NormKind::layer, 768, 1e-5);  Tensor n = ln.forward(h);
//   Tensor a = apply_activation(Activation::gelu_tanh, h);
#pragma once

#include <string>

#include "models/module.h"
#include "ops/norm.h"

namespace libai::models {

class Linear : public Module {
 public:
  Linear(const LayerContext& ctx, int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor& weight() { return weight_; }
  Tensor* bias() { return bias_; }
  int64_t in_features() const { return weight_.size(1); }
  int64_t out_features() const { return weight_.size(0); }

 private:
  Tensor& weight_;  // [out, in]
  Tensor* bias_ = nullptr;
};

class Embedding : public Module {
 public:
  Embedding(const LayerContext& ctx, int64_t count, int64_t dim);
  // ids [...] (i64/i32) -> [..., dim]
  Tensor forward(const Tensor& ids) const;
  Tensor& weight() { return weight_; }
  int64_t count() const { return weight_.size(0); }

 private:
  Tensor& weight_;  // [count, dim]
};

// LayerNorm (weight and optional bias) or RMSNorm (weight only) over the last dim.
class Norm : public Module {
 public:
  Norm(const LayerContext& ctx, ops::NormKind kind, int64_t dim, double eps, bool bias = true);
  Tensor forward(const Tensor& x) const;

 private:
  ops::NormKind kind_;
  double eps_;
  Tensor& weight_;
  Tensor* bias_ = nullptr;
};

enum class Activation { gelu, gelu_tanh, relu, silu, tanh, quick_gelu };
// Hugging Face's names: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish, tanh,
// quick_gelu. Throws InvalidArgument naming `name` and `where` for anything else.
Activation parse_activation(const std::string& name, const std::string& where);
Tensor apply_activation(Activation act, const Tensor& x);

}  // namespace libai::models
