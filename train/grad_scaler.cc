#include "train/grad_scaler.h"

#include <cmath>

#include "runtime/error.h"

namespace libai::train {

GradScaler::GradScaler(const GradScalerOptions& options)
    : options_(options), scale_(float(options.init_scale)) {
  LIBAI_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale),
              "loss scaler: init_scale must be a positive finite number, got ", options.init_scale);
  LIBAI_CHECK(options.growth_factor > 1.0, "loss scaler: growth_factor must be > 1, got ",
              options.growth_factor);
  LIBAI_CHECK(options.backoff_factor > 0.0 && options.backoff_factor < 1.0,
              "loss scaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  LIBAI_CHECK(options.growth_interval >= 1, "loss scaler: growth_interval must be >= 1, got ",
              options.growth_interval);
}

bool GradScaler::unscale(const std::vector<models::ParameterInfo>& params,
                         const std::vector<std::shared_ptr<comm::Communicator>>& groups) {
  const float inv_scale = float(1.0 / double(scale_));
  bool found_inf = false;
  for (const auto& info : params) {
    Tensor grad = info.tensor->grad();
    if (!grad.defined()) continue;
    LIBAI_CHECK_KIND(Unsupported, grad.device().is_cpu() && grad.dtype() == DType::f32,
                     "loss scaler: gradient of ", info.name, " is ", grad.dtype(), " on ",
                     grad.device(), "; expected f32 master gradients on CPU");
    LIBAI_ASSERT(grad.is_contiguous(), "gradient of ", info.name, " is not contiguous");
    float* g = grad.data<float>();
    const int64_t n = grad.numel();
    for (int64_t i = 0; i < n; ++i) {
      g[i] *= inv_scale;
      found_inf |= !std::isfinite(g[i]);
    }
  }
  for (const auto& group : groups) {
    if (!group || group->size() == 1) continue;
    Tensor flag = Tensor::full({1}, found_inf ? 1.0 : 0.0, DType::f32);
    group->all_reduce(flag, comm::ReduceOp::max);
    found_inf = flag.data<float>()[0] > 0.0f;
  }
  return !found_inf;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ = float(double(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    const float grown = float(double(scale_) * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;  // torch never grows the scale to inf
    growth_tracker_ = 0;
  }
}

void GradScaler::set_state(double scale, int64_t growth_tracker) {
  LIBAI_CHECK(scale > 0 && std::isfinite(scale), "loss scaler: saved scale ", scale,
              " is not a positive finite number");
  LIBAI_CHECK(growth_tracker >= 0 && growth_tracker < options_.growth_interval,
              "loss scaler: saved growth tracker ", growth_tracker, " is outside [0, ",
              options_.growth_interval, ")");
  scale_ = float(scale);
  growth_tracker_ = growth_tracker;
}

}  // namespace libai::train
