#include "models/init.h"

#include <cmath>
#include <set>

#include "models/family.h"
#include "models/layers/linear.h"
#include "ops/view.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"

namespace libai::models {

void init_parameters(Model& model, uint64_t seed) {
  const HfConfig& c = model.config();
  const double std = c.get_double("initializer_range", c.get_double("initializer_factor", 0.02));
  const Family* family = find_family(c.model_type());
  const bool scaled_residual = family && family->scaled_residual_init;
  const double layers = scaled_residual ? double(family->num_layers(c)) : 1.0;
  std::set<const Tensor*> norm_params;
  for (auto& [path, module] : model.named_modules())
    if (dynamic_cast<Norm*>(module))
      for (auto& [name, tensor] : module->named_parameters()) norm_params.insert(tensor);
  autograd::NoGradGuard no_grad;
  for (const ParameterInfo& info : model.parameter_infos()) {
    Tensor& t = *info.tensor;
    const bool is_bias = info.name.ends_with("bias");
    if (norm_params.contains(info.tensor)) {
      t.copy_from(Tensor::full(t.shape(), is_bias ? 0.0 : 1.0, t.dtype()));
      continue;
    }
    if (is_bias) {
      t.copy_from(Tensor::zeros(t.shape(), t.dtype()));
      continue;
    }
    double scale = std;
    if (scaled_residual &&
        (info.name.ends_with("attention.out.weight") || info.name.ends_with("mlp.down.weight")))
      scale = std / std::sqrt(2.0 * layers);
    if (info.partly_replicated()) {  // each range as the whole's rows: copies agree
      int64_t at = 0;
      for (const TpRows& range : info.rows[size_t(info.tp_rank)]) {
        Tensor rows = ops::narrow(t, 0, at, range.length);
        Tensor values = Tensor::empty(rows.shape(), t.dtype(), t.device());
        Shape starts(t.shape().size(), 0);
        starts[0] = range.start;
        init_normal(values, RngKey{seed, stream_id(info.name)}, 0.0, scale, info.logical_shape,
                    starts);
        rows.copy_from(values);
        at += range.length;
      }
      continue;
    }
    Shape starts(t.shape().size(), 0);
    if (info.split_dim >= 0 && info.tp_size > 1)
      starts[size_t(info.split_dim)] = info.tp_rank * t.size(info.split_dim);
    // The padding rows of an uneven split (the vocabulary, dim 0) lie past the logical shape:
    // extending dim 0 changes no stride, so the real rows keep their one-device values.
    Shape logical = info.logical_shape;
    if (info.split_dim == 0) logical[0] = std::max(logical[0], starts[0] + t.size(0));
    init_normal(t, RngKey{seed, stream_id(info.name)}, 0.0, scale, logical, starts);
  }
}

}  // namespace libai::models
