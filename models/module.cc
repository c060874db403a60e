#include "models/module.h"

namespace libai::models {

Tensor& Module::add_parameter(const std::string& name, const Shape& shape, const LayerContext& ctx,
                              int split_dim, bool pad_uneven) {
  Shape local = shape;
  if (split_dim >= 0) {
    LIBAI_ASSERT(split_dim < int(shape.size()), "parameter ", name, ": split dim ", split_dim,
                 " of shape ", shape_str(shape));
    const int64_t tp = ctx.tp_size();
    LIBAI_CHECK(pad_uneven || shape[split_dim] % tp == 0, "parameter ", name, " of shape ",
                shape_str(shape), ": dim ", split_dim, " (", shape[split_dim],
                ") is not divisible by tensor_parallel_size ", tp);
    local[split_dim] = (shape[split_dim] + tp - 1) / tp;
  }
  Slot slot;
  slot.tensor = std::make_unique<Tensor>(Tensor::zeros(local, ctx.dtype, ctx.device));
  slot.info = {name, slot.tensor.get(), split_dim, shape, ctx.tp_rank(), ctx.tp_size()};
  parameters_.push_back(std::move(slot));
  return *parameters_.back().tensor;
}

void Module::collect(const std::string& prefix, std::vector<ParameterInfo>& out) {
  for (auto& slot : parameters_) {
    ParameterInfo info = slot.info;
    info.name = prefix + info.name;
    out.push_back(std::move(info));
  }
  for (auto& [name, child] : children_)
    child->collect(name.empty() ? prefix : prefix + name + ".", out);
}

std::vector<ParameterInfo> Module::parameter_infos() {
  std::vector<ParameterInfo> out;
  collect("", out);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& info : parameter_infos()) out.emplace_back(info.name, info.tensor);
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

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [name, child] : children_)
    for (auto& [sub, module] : child->named_modules())
      out.emplace_back(sub.empty() ? name : name.empty() ? sub : name + "." + sub, module);
  return out;
}

void Module::set_path(const std::string& path) {
  path_ = path;
  for (auto& [name, child] : children_)
    child->set_path(path_.empty() || name.empty() ? path_ + name : path_ + "." + name);
}

void Module::set_requires_grad(bool value) {
  for (auto& [n, t] : named_parameters()) t->set_requires_grad(value);
}

}  // namespace libai::models
