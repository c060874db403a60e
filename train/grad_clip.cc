#include "train/grad_clip.h"

#include <cmath>

#include "ops/view.h"
#include "runtime/error.h"

namespace libai::train {
namespace {

// Gradients are CPU f32 (or f64) here; a device kernel is needed before GPU training.
template <typename Fn>
void for_each_grad_value(const Tensor& grad, const char* name, Fn&& fn) {
  LIBAI_CHECK_KIND(Unsupported, grad.device().is_cpu(), "gradient of ", name, " is on ",
                   grad.device(), ": gradient norms run on CPU gradients only");
  LIBAI_ASSERT(grad.is_contiguous(), "gradient of ", name, " is not contiguous");
  const int64_t n = grad.numel();
  if (grad.dtype() == DType::f32) {
    const float* g = grad.data<float>();
    for (int64_t i = 0; i < n; ++i) fn(double(g[i]));
  } else {
    LIBAI_CHECK_KIND(Unsupported, grad.dtype() == DType::f64, "gradient of ", name, " has dtype ",
                     grad.dtype(), "; expected f32 or f64 (master gradients)");
    const double* g = grad.data<double>();
    for (int64_t i = 0; i < n; ++i) fn(g[i]);
  }
}

// Sum of squares in f64 over 8 partial sums, so the compiler vectorises it (one running sum
// is a dependency chain it may not reorder).
double sum_of_squares(const Tensor& grad, const char* name) {
  if (grad.dtype() != DType::f32 || !grad.device().is_cpu() || !grad.is_contiguous()) {
    double total = 0;
    for_each_grad_value(grad, name, [&](double v) { total += v * v; });
    return total;
  }
  const float* g = grad.data<float>();
  const int64_t n = grad.numel();
  double partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) partial[k] += double(g[i + k]) * double(g[i + k]);
  double total = 0;
  for (; i < n; ++i) total += double(g[i]) * double(g[i]);
  for (double p : partial) total += p;
  return total;
}

double reduce_over(double value, const std::shared_ptr<comm::Communicator>& group,
                   comm::ReduceOp op) {
  if (!group || group->size() == 1) return value;
  Tensor t = Tensor::full({1}, value, DType::f64);
  group->all_reduce(t, op);
  return t.data<double>()[0];
}

}  // namespace

double global_grad_norm(const std::vector<models::ParameterInfo>& params, double norm_type,
                        const NormGroups& groups) {
  const bool inf = std::isinf(norm_type);
  LIBAI_CHECK(inf || norm_type >= 1.0, "gradient clipping: norm type ", norm_type,
              " is not supported (expected a p >= 1, e.g. 2, or inf)");
  const int tp_rank = groups.tp ? groups.tp->rank() : 0;
  double total = 0.0;
  for (const auto& info : params) {
    const Tensor grad = info.tensor->grad();
    if (!grad.defined()) continue;
    const bool replicated = info.split_dim < 0 || info.tp_size == 1;
    if (replicated && tp_rank != 0) continue;  // Note [Each element counted once]
    // A partly replicated block counts the elements this rank owns (Note [Partly replicated
    // parameters] in models/module.h).
    std::vector<Tensor> parts{grad};
    if (info.partly_replicated()) {
      parts.clear();
      const Tensor flat = ops::reshape(grad, {grad.numel()});
      for (const auto& [begin, end] : info.owned_elements)
        parts.push_back(ops::narrow(flat, 0, begin, end - begin));
    }
    for (const Tensor& part : parts) {
      if (inf)
        for_each_grad_value(part, info.name.c_str(), [&](double v) {
          // NaN propagates: max(nan, x) must stay nan.
          total = (std::isnan(v) || std::isnan(total)) ? NAN : std::max(total, std::abs(v));
        });
      else if (norm_type == 2.0)
        total += sum_of_squares(part, info.name.c_str());
      else
        for_each_grad_value(part, info.name.c_str(),
                            [&](double v) { total += std::pow(std::abs(v), norm_type); });
    }
  }
  const comm::ReduceOp op = inf ? comm::ReduceOp::max : comm::ReduceOp::sum;
  total = reduce_over(total, groups.tp, op);
  for (const auto& group : groups.sharded) total = reduce_over(total, group, op);
  if (inf) return total;
  return norm_type == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / norm_type);
}

void scale_grads(const std::vector<models::ParameterInfo>& params, double factor) {
  for (const auto& info : params) {
    Tensor grad = info.tensor->grad();
    if (!grad.defined()) continue;
    LIBAI_ASSERT(grad.device().is_cpu() && grad.is_contiguous(), "gradient of ", info.name);
    const int64_t n = grad.numel();
    if (grad.dtype() == DType::f32) {
      // torch multiplies f32 gradients by an f32 coefficient.
      const float f = float(factor);
      float* g = grad.data<float>();
      for (int64_t i = 0; i < n; ++i) g[i] *= f;
    } else {
      double* g = grad.data<double>();
      for (int64_t i = 0; i < n; ++i) g[i] *= factor;
    }
  }
}

double clip_grad_norm(const std::vector<models::ParameterInfo>& params, double max_norm,
                      double norm_type, const NormGroups& groups) {
  LIBAI_CHECK(max_norm > 0.0, "gradient clipping: clip_grad_max_norm must be > 0, got ", max_norm);
  const double norm = global_grad_norm(params, norm_type, groups);
  if (!std::isfinite(norm)) return norm;
  // torch computes the coefficient in f32 from its f32 norm.
  const double coefficient = double(float(max_norm) / (float(norm) + 1e-6f));
  if (coefficient < 1.0) scale_grads(params, coefficient);
  return norm;
}

}  // namespace libai::train
