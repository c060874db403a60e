#include "models/module.h"

#include <algorithm>

#include "ops/view.h"

namespace libai::models {

std::shared_ptr<comm::Communicator> LayerContext::tp_subgroup(int size) const {
  const int n = tp_size();
  LIBAI_CHECK(size >= 1 && n % size == 0, "tp_subgroup: ", size,
              " ranks do not divide the tensor-parallel group of ", n);
  if (size == n) return tp;
  auto it = subgroups->find(size);
  if (it != subgroups->end()) return it->second;
  std::shared_ptr<comm::Communicator> mine;
  for (int first = 0; first < n; first += size) {  // every rank makes every block, in order
    std::vector<int> ranks(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) ranks[size_t(i)] = first + i;
    auto group = tp->new_group(ranks);
    if (group) mine = group;
  }
  LIBAI_ASSERT(mine, "tp_subgroup: rank ", tp_rank(), " is in none of the groups");
  subgroups->emplace(size, mine);
  return mine;
}

namespace {

Tensor new_parameter(const Shape& shape, const LayerContext& ctx) {
  return ctx.uninitialized_parameters ? Tensor::empty(shape, ctx.dtype, ctx.device)
                                      : Tensor::zeros(shape, ctx.dtype, ctx.device);
}

}  // namespace

Tensor& Module::add_parameter(const std::string& name, const Shape& shape, const LayerContext& ctx,
                              const std::vector<std::vector<TpRows>>& rows) {
  const int tp = ctx.tp_size();
  LIBAI_ASSERT(!shape.empty() && int(rows.size()) == tp, "parameter ", name, ": rows of ",
               rows.size(), " ranks for a tensor-parallel group of ", tp);
  int64_t block = -1;
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t total = 0;
    for (const TpRows& range : rows[r]) {
      LIBAI_ASSERT(range.start >= 0 && range.length > 0 && range.start + range.length <= shape[0] &&
                       range.owner >= 0 && range.owner <= int(r),
                   "parameter ", name, ": rank ", r, "'s rows [", range.start, ", +",
                   range.length, ") owned by ", range.owner, " do not fit ", shape_str(shape));
      total += range.length;
    }
    LIBAI_ASSERT(block < 0 || total == block, "parameter ", name,
                 ": ranks hold blocks of different sizes");
    block = total;
  }
  Shape local = shape;
  local[0] = block;
  Slot slot;
  slot.tensor = std::make_unique<Tensor>(new_parameter(local, ctx));
  slot.info = {name, slot.tensor.get(), 0, shape, ctx.tp_rank(), tp, {}, {}};
  if (tp > 1) {
    slot.info.rows = rows;
    const int64_t row_size = shape_numel(shape) / shape[0];
    int64_t at = 0;
    for (const TpRows& range : rows[size_t(ctx.tp_rank())]) {
      auto& owned = slot.info.owned_elements;
      if (range.owner == ctx.tp_rank()) {
        if (!owned.empty() && owned.back().second == at * row_size)
          owned.back().second = (at + range.length) * row_size;
        else
          owned.emplace_back(at * row_size, (at + range.length) * row_size);
      }
      at += range.length;
    }
  }
  parameters_.push_back(std::move(slot));
  return *parameters_.back().tensor;
}

Tensor tp_block_of(const Tensor& whole, const ParameterInfo& info, int rank,
                   const Shape& block_shape) {
  if (!info.split()) return whole;
  const int d = info.split_dim;
  Tensor out = Tensor::zeros(block_shape, whole.dtype(), whole.device());
  if (info.partly_replicated()) {
    int64_t at = 0;
    for (const TpRows& range : info.rows[size_t(rank)]) {
      ops::narrow(out, d, at, range.length).copy_from(ops::narrow(whole, d, range.start, range.length));
      at += range.length;
    }
    return out;
  }
  const int64_t part = block_shape[size_t(d)], start = rank * part;
  const int64_t length = std::clamp<int64_t>(info.logical_shape[size_t(d)] - start, 0, part);
  if (length > 0) ops::narrow(out, d, 0, length).copy_from(ops::narrow(whole, d, start, length));
  return out;
}

Tensor whole_of_blocks(const std::vector<Tensor>& blocks, const ParameterInfo& info) {
  if (!info.split()) return blocks.at(0);
  LIBAI_ASSERT(int(blocks.size()) == info.tp_size, "whole_of_blocks: ", blocks.size(),
               " blocks of ", info.name, " split over ", info.tp_size);
  const int d = info.split_dim;
  Tensor whole = Tensor::empty(info.logical_shape, blocks[0].dtype(), blocks[0].device());
  for (int t = 0; t < info.tp_size; ++t) {
    const Tensor& block = blocks[size_t(t)];
    if (info.partly_replicated()) {
      int64_t at = 0;
      for (const TpRows& range : info.rows[size_t(t)]) {
        if (range.owner == t)
          ops::narrow(whole, d, range.start, range.length).copy_from(ops::narrow(block, d, at, range.length));
        at += range.length;
      }
      continue;
    }
    const int64_t part = block.size(d), start = t * part;
    const int64_t length = std::clamp<int64_t>(info.logical_shape[size_t(d)] - start, 0, part);
    if (length > 0) ops::narrow(whole, d, start, length).copy_from(ops::narrow(block, d, 0, length));
  }
  return whole;
}

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
  slot.tensor = std::make_unique<Tensor>(new_parameter(local, ctx));
  slot.info = {name, slot.tensor.get(), split_dim, shape, ctx.tp_rank(), ctx.tp_size(), {}, {}};
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
