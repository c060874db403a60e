#include "models/module.h"

namespace libai::models {

Tensor& Module::add_parameter(const std::string& name, const Shape& shape,
                              const LayerContext& ctx) {
  parameters_.emplace_back(name, std::make_unique<Tensor>(Tensor::zeros(shape, ctx.dtype, ctx.device)));
  return *parameters_.back().second;
}

void Module::collect(const std::string& prefix,
                     std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& [name, tensor] : parameters_) out.emplace_back(prefix + name, tensor.get());
  for (auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect("", out);
  return out;
}

Tensor* Module::find_parameter(const std::string& name) {
  for (auto& [n, t] : named_parameters())
    if (n == name) return t;
  return nullptr;
}

int64_t Module::parameter_count() {
  int64_t total = 0;
  for (auto& [n, t] : named_parameters()) total += t->numel();
  return total;
}

void Module::set_requires_grad(bool value) {
  for (auto& [n, t] : named_parameters()) t->set_requires_grad(value);
}

}  // namespace libai::models
