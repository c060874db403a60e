#include "models/layers/linear.h"

#include "ops/ops.h"

namespace libai::models {

Linear::Linear(const LayerContext& ctx, int64_t in_features, int64_t out_features, bool bias)
    : weight_(add_parameter("weight", {out_features, in_features}, ctx)) {
  if (bias) bias_ = &add_parameter("bias", {out_features}, ctx);
}

Tensor Linear::forward(const Tensor& x) const {
  return ops::linear(x, weight_, bias_ ? *bias_ : Tensor());
}

Embedding::Embedding(const LayerContext& ctx, int64_t count, int64_t dim)
    : weight_(add_parameter("weight", {count, dim}, ctx)) {}

Tensor Embedding::forward(const Tensor& ids) const { return ops::embedding(weight_, ids); }

Norm::Norm(const LayerContext& ctx, ops::NormKind kind, int64_t dim, double eps, bool bias)
    : kind_(kind), eps_(eps), weight_(add_parameter("weight", {dim}, ctx)) {
  if (bias && kind == ops::NormKind::layer) bias_ = &add_parameter("bias", {dim}, ctx);
}

Tensor Norm::forward(const Tensor& x) const {
  if (kind_ == ops::NormKind::rms) return ops::rms_norm(x, weight_, eps_);
  return ops::layer_norm(x, weight_, bias_ ? *bias_ : Tensor(), eps_);
}

Activation parse_activation(const std::string& name, const std::string& where) {
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
    return Activation::gelu_tanh;
  if (name == "relu") return Activation::relu;
  if (name == "silu" || name == "swish") return Activation::silu;
  if (name == "tanh") return Activation::tanh;
  if (name == "quick_gelu") return Activation::quick_gelu;
  LIBAI_CHECK(false, where, ": unsupported activation \"", name,
              "\" (supported: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish, "
              "tanh, quick_gelu)");
  return Activation::gelu;
}

Tensor apply_activation(Activation act, const Tensor& x) {
  switch (act) {
    case Activation::gelu: return ops::gelu(x);
    case Activation::gelu_tanh: return ops::gelu(x, ops::GeluApprox::tanh);
    case Activation::relu: return ops::relu(x);
    case Activation::silu: return ops::silu(x);
    case Activation::tanh: return ops::tanh(x);
    case Activation::quick_gelu: return ops::mul(x, ops::sigmoid(ops::scale(x, 1.702)));
  }
  return x;
}

}  // namespace libai::models
