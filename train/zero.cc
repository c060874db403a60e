#include "train/zero.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "models/layers/transformer_layer.h"
#include "runtime/autograd.h"
#include "runtime/error.h"

namespace libai::train {

namespace {

// A tensor over `storage` (f32, contiguous), without autograd.
Tensor over(const std::shared_ptr<Storage>& storage, const Shape& shape, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->offset = offset;
  impl->dtype = DType::f32;
  return Tensor(std::move(impl));
}

Tensor flat_view(const Tensor& t, int64_t begin, int64_t end) {
  LIBAI_ASSERT(t.is_contiguous(), "ZeRO: a non-contiguous tensor");
  return t.as_strided({end - begin}, {1}, t.offset() + begin);
}

}  // namespace

struct ZeroShards::Impl final : models::ParameterFetch {
  struct Unit {
    int chunk = 0;
    const models::Module* layer = nullptr;  // a transformer layer; null: part-level
    bool tied = false;
    std::vector<models::ParameterInfo> infos;  // .tensor: the live parameter
    std::vector<int64_t> offsets;              // of each parameter in the unit
    int64_t numel = 0, shard = 0;              // padded to a multiple of dp; numel / dp
    std::shared_ptr<Storage> flat;             // the whole unit (freed between uses at stage 3)
    Tensor whole;                              // [numel] over `flat`
    Tensor shard_param, shard_grad;            // [shard]: this rank's block
    std::vector<bool> arrived, had_grad;
    int64_t ready = 0;
    bool gathered = true;
  };
  struct Segment {
    size_t unit = 0, index = 0;  // the parameter: unit's infos[index]
    int64_t begin = 0, end = 0;  // of the parameter's elements
    std::string name;            // "<parameter>#<begin>": the shard optimizer's name
    Tensor value, grad;          // 1-D views of the unit's shards
  };

  int stage = 1;
  std::shared_ptr<comm::Communicator> dp;
  int dp_size = 1, dp_rank = 0;
  std::vector<Unit> units;
  std::vector<Segment> segments;
  std::map<const models::Module*, size_t> by_layer;
  std::unique_ptr<Optimizer> optimizer;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  void fetch(const models::Module& layer) override {
    if (auto it = by_layer.find(&layer); it != by_layer.end()) gather(units[it->second]);
  }
  void release(const models::Module& layer) override {
    if (auto it = by_layer.find(&layer); it != by_layer.end()) free_unit(units[it->second]);
  }

  // Stage 3: the whole unit from every rank's block.
  void gather(Unit& u) {
    if (u.gathered) return;
    u.flat->data = u.flat->allocator->allocate(u.flat->nbytes);
    u.gathered = true;
    if (dp_size == 1) {
      u.whole.copy_from(u.shard_param);
      return;
    }
    dp->all_gather(u.shard_param, u.whole);
  }
  void free_unit(Unit& u) {
    if (stage < 3 || !u.gathered) return;
    u.flat->allocator->deallocate(u.flat->data, u.flat->nbytes);
    u.flat->data = nullptr;
    u.gathered = false;
  }

  // The unit's gradients (zeros where a parameter has none) reduce-scattered, divided by dp,
  // added into this rank's gradient shard; the whole gradients freed.
  void reduce(Unit& u) {
    Tensor staging = Tensor::zeros({u.numel});
    float* dst = staging.data<float>();
    for (size_t i = 0; i < u.infos.size(); ++i) {
      Tensor* p = u.infos[i].tensor;
      Tensor g = p->grad();
      if (!g.defined()) continue;
      LIBAI_CHECK(g.dtype() == DType::f32 && g.numel() == p->numel(), "ZeRO: the gradient of ",
                  u.infos[i].name, " is ", g.dtype(), " ", shape_str(g.shape()),
                  "; expected f32 of its parameter's shape");
      if (!g.is_contiguous()) g = g.clone_raw();
      std::memcpy(dst + u.offsets[i], g.data_ptr(), size_t(g.numel()) * sizeof(float));
      u.had_grad[i] = true;
      p->zero_grad();
    }
    Tensor mine = staging;
    if (dp_size > 1) {
      mine = Tensor::empty({u.shard});
      dp->reduce_scatter(staging, mine);
    }
    const float inv = float(1.0 / double(dp_size));
    float* acc = u.shard_grad.data<float>();
    const float* in = mine.data<float>();
    for (int64_t k = 0; k < u.shard; ++k) acc[k] += in[k] * inv;
    std::fill(u.arrived.begin(), u.arrived.end(), false);
    u.ready = 0;
  }

  void on_gradient(size_t ui, size_t pi) {
    if (stage < 2) return;
    Unit& u = units[ui];
    if (u.arrived[pi]) return;
    u.arrived[pi] = true;
    if (++u.ready < int64_t(u.infos.size())) return;
    reduce(u);
    free_unit(u);
  }
};

ZeroShards::ZeroShards(int stage, const std::vector<models::Model*>& parts,
                       const std::vector<ParamGroup>& groups, const OptimizerOptions& optimizer,
                       std::shared_ptr<comm::Communicator> dp, const std::set<std::string>& tied)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  LIBAI_CHECK(stage >= 1 && stage <= 3, "ZeRO: stage must be 1, 2 or 3, got ", stage);
  s.stage = stage;
  s.dp = std::move(dp);
  s.dp_size = s.dp ? s.dp->size() : 1;
  s.dp_rank = s.dp ? s.dp->rank() : 0;
  // Which parameters the optimizer trains, and in which of its groups.
  std::map<const TensorImpl*, size_t> group_of;
  for (size_t g = 0; g < groups.size(); ++g)
    for (Tensor* p : groups[g].params) group_of[p->impl_ptr().get()] = g;
  // Units (Note [ZeRO partitions]): per part, the rest, then each layer, then each tied weight.
  std::set<const TensorImpl*> placed;
  for (size_t c = 0; c < parts.size(); ++c) {
    const std::vector<models::ParameterInfo> infos = parts[c]->parameter_infos();
    std::map<const TensorImpl*, const models::ParameterInfo*> info_of;
    for (const auto& info : infos) info_of[info.tensor->impl_ptr().get()] = &info;
    auto trainable = [&](const Tensor* t) {
      const TensorImpl* key = t->impl_ptr().get();
      return group_of.contains(key) && !placed.contains(key);
    };
    std::vector<Impl::Unit> layers, tied_units;
    for (auto& [path, module] : parts[c]->named_modules()) {
      const auto* layer = dynamic_cast<const models::TransformerLayer*>(module);
      if (!layer) continue;
      Impl::Unit u;
      u.chunk = int(c);
      u.layer = layer;
      for (auto& [name, t] : module->named_parameters())
        if (trainable(t)) u.infos.push_back(*info_of.at(t->impl_ptr().get()));
      for (const auto& info : u.infos) placed.insert(info.tensor->impl_ptr().get());
      if (!u.infos.empty()) layers.push_back(std::move(u));
    }
    Impl::Unit rest;
    rest.chunk = int(c);
    for (const auto& info : infos) {
      if (!trainable(info.tensor)) continue;
      placed.insert(info.tensor->impl_ptr().get());
      if (tied.contains(info.name)) {
        Impl::Unit u;
        u.chunk = int(c);
        u.tied = true;
        u.infos.push_back(info);
        tied_units.push_back(std::move(u));
      } else {
        rest.infos.push_back(info);
      }
    }
    if (!rest.infos.empty()) s.units.push_back(std::move(rest));
    for (auto& u : layers) s.units.push_back(std::move(u));
    for (auto& u : tied_units) s.units.push_back(std::move(u));
  }
  for (const auto& [key, g] : group_of)
    LIBAI_CHECK(placed.contains(key), "ZeRO: a parameter of optimizer group ", g,
                " is on none of this rank's parts");
  // Each unit's flat buffer; the parameters become views of it.
  autograd::NoGradGuard no_grad;
  for (size_t ui = 0; ui < s.units.size(); ++ui) {
    Impl::Unit& u = s.units[ui];
    int64_t n = 0;
    for (const auto& info : u.infos) {
      const Tensor& p = *info.tensor;
      LIBAI_CHECK(p.dtype() == DType::f32 && p.device().is_cpu(), "ZeRO: parameter ", info.name,
                  " is ", p.dtype(), " on ", p.device(),
                  "; ZeRO shards f32 parameters in host memory in this build");
      u.offsets.push_back(n);
      n += p.numel();
    }
    u.numel = (n + s.dp_size - 1) / s.dp_size * s.dp_size;
    u.shard = u.numel / s.dp_size;
    u.flat = std::make_shared<Storage>(size_t(u.numel) * sizeof(float), Device::cpu());
    u.whole = over(u.flat, {u.numel}, 0);
    std::memset(u.flat->data, 0, u.flat->nbytes);
    for (size_t i = 0; i < u.infos.size(); ++i) {
      Tensor* p = u.infos[i].tensor;
      Tensor view = over(u.flat, p->shape(), u.offsets[i]);
      view.copy_from(*p);
      TensorImpl& impl = p->impl();
      impl.storage = u.flat;
      impl.offset = u.offsets[i];
      impl.strides = contiguous_strides(impl.shape);
    }
    u.shard_grad = Tensor::zeros({u.shard});
    if (s.stage == 3) {
      u.shard_param = flat_view(u.whole, s.dp_rank * u.shard, (s.dp_rank + 1) * u.shard).clone_raw();
      s.free_unit(u);
    } else {
      u.shard_param = flat_view(u.whole, s.dp_rank * u.shard, (s.dp_rank + 1) * u.shard);
    }
    u.arrived.assign(u.infos.size(), false);
    u.had_grad.assign(u.infos.size(), false);
    if (u.layer) s.by_layer[u.layer] = ui;
    // This rank's segments of the unit's parameters.
    const int64_t lo = s.dp_rank * u.shard, hi = lo + u.shard;
    for (size_t i = 0; i < u.infos.size(); ++i) {
      const int64_t a = std::max(lo, u.offsets[i]);
      const int64_t b = std::min(hi, u.offsets[i] + u.infos[i].tensor->numel());
      if (a >= b) continue;
      Impl::Segment seg;
      seg.unit = ui;
      seg.index = i;
      seg.begin = a - u.offsets[i];
      seg.end = b - u.offsets[i];
      seg.name = u.infos[i].name + "#" + std::to_string(seg.begin);
      seg.value = flat_view(u.shard_param, a - lo, b - lo);
      seg.grad = flat_view(u.shard_grad, a - lo, b - lo);
      s.segments.push_back(std::move(seg));
    }
    // Stage 2, 3: each unit reduces as soon as backward has produced its gradients.
    std::weak_ptr<bool> alive = s.alive;
    Impl* self = &s;
    for (size_t i = 0; i < u.infos.size(); ++i)
      u.infos[i].tensor->add_grad_ready_hook([alive, self, ui, i](const Tensor&) {
        if (alive.lock()) self->on_gradient(ui, i);
      });
  }
  // The shard optimizer: the same groups over this rank's segments.
  std::vector<ParamGroup> shard_groups;
  for (const ParamGroup& g : groups)
    shard_groups.push_back({.names = {}, .params = {}, .base_lr = g.base_lr, .lr = g.lr,
                            .weight_decay = g.weight_decay});
  for (Impl::Segment& seg : s.segments) {
    const Tensor* p = s.units[seg.unit].infos[seg.index].tensor;
    ParamGroup& g = shard_groups[group_of.at(p->impl_ptr().get())];
    g.names.push_back(seg.name);
    g.params.push_back(&seg.value);
  }
  s.optimizer = make_optimizer(std::move(shard_groups), optimizer);
}

ZeroShards::~ZeroShards() = default;

int ZeroShards::stage() const { return impl_->stage; }
models::ParameterFetch* ZeroShards::fetcher() { return impl_->stage == 3 ? impl_.get() : nullptr; }

void ZeroShards::before_forward(int chunk) {
  if (impl_->stage < 3) return;
  for (auto& u : impl_->units)
    if (u.chunk == chunk && !u.layer) impl_->gather(u);
}

void ZeroShards::after_forward(int chunk) {
  if (impl_->stage < 3) return;
  for (auto& u : impl_->units)
    if (u.chunk == chunk && !u.layer) impl_->free_unit(u);
}

void ZeroShards::before_backward(int chunk) { before_forward(chunk); }

void ZeroShards::after_backward(int chunk) {
  Impl& s = *impl_;
  if (s.stage < 2) return;
  autograd::NoGradGuard no_grad;
  for (auto& u : s.units) {
    if (u.chunk != chunk) continue;
    if (u.ready > 0) s.reduce(u);  // some gradients never came: zeros in their place
    s.free_unit(u);
  }
}

void ZeroShards::reduce_gradients() {
  Impl& s = *impl_;
  autograd::NoGradGuard no_grad;
  if (s.stage == 1)
    for (auto& u : s.units) s.reduce(u);
  // The segments' gradients: a parameter that had none this step keeps none (the optimizer
  // skips it, as on one device).
  for (auto& seg : s.segments) {
    if (s.units[seg.unit].had_grad[seg.index])
      seg.value.set_grad(seg.grad);
    else
      seg.value.zero_grad();
  }
}

void ZeroShards::sum_tied(comm::Communicator& tied) {
  for (auto& u : impl_->units)
    if (u.tied) tied.all_reduce(u.shard_grad);
}

std::vector<models::ParameterInfo> ZeroShards::grad_infos(bool skip_tied) {
  Impl& s = *impl_;
  std::vector<models::ParameterInfo> out;
  for (auto& seg : s.segments) {
    const Impl::Unit& u = s.units[seg.unit];
    if ((skip_tied && u.tied) || !u.had_grad[seg.index]) continue;
    models::ParameterInfo info = u.infos[seg.index];
    info.tensor = &seg.value;
    if (info.partly_replicated()) {  // the segment's share of the owned elements
      std::vector<std::pair<int64_t, int64_t>> owned;
      for (const auto& [begin, end] : info.owned_elements) {
        const int64_t b = std::max(begin, seg.begin), e = std::min(end, seg.end);
        if (b < e) owned.emplace_back(b - seg.begin, e - seg.begin);
      }
      info.owned_elements = std::move(owned);
    }
    out.push_back(std::move(info));
  }
  return out;
}

Optimizer& ZeroShards::optimizer() { return *impl_->optimizer; }

void ZeroShards::gather_parameters() {
  Impl& s = *impl_;
  if (s.stage == 3 || s.dp_size == 1) return;
  for (auto& u : s.units) {
    Tensor mine = u.shard_param.clone_raw();  // the collective's input may not alias its output
    s.dp->all_gather(mine, u.whole);
  }
}

void ZeroShards::zero_grad() {
  for (auto& u : impl_->units) {
    std::fill(u.had_grad.begin(), u.had_grad.end(), false);
    std::fill(u.arrived.begin(), u.arrived.end(), false);
    u.ready = 0;
    std::memset(u.shard_grad.data_ptr(), 0, u.shard_grad.nbytes());
    for (auto& info : u.infos) info.tensor->zero_grad();
  }
  for (auto& seg : impl_->segments) seg.value.zero_grad();
}

void ZeroShards::fetch_all() {
  for (auto& u : impl_->units) impl_->gather(u);
}

void ZeroShards::release_all() {
  for (auto& u : impl_->units) impl_->free_unit(u);
}

std::vector<OwnedSlice> ZeroShards::owned() {
  Impl& s = *impl_;
  std::map<std::string, Tensor> state = s.optimizer->state_tensors();
  std::vector<OwnedSlice> out;
  for (auto& seg : s.segments) {
    const Impl::Unit& u = s.units[seg.unit];
    OwnedSlice slice;
    slice.info = u.infos[seg.index];
    slice.local_shape = slice.info.tensor->shape();
    slice.begin = seg.begin;
    slice.end = seg.end;
    slice.values = seg.value;
    const std::string prefix = seg.name + ".";
    for (auto it = state.lower_bound(prefix); it != state.end() && it->first.starts_with(prefix);
         ++it)
      slice.state[it->first.substr(prefix.size())] = it->second;
    out.push_back(std::move(slice));
  }
  return out;
}

void ZeroShards::load(const BlockSource& parameter, const StateSource& state,
                      int64_t optimizer_steps) {
  Impl& s = *impl_;
  autograd::NoGradGuard no_grad;
  const std::vector<std::string> keys = parameter_state_keys(s.optimizer->options());
  std::map<std::string, Tensor> loaded{
      {"step", Tensor::full({}, double(optimizer_steps), DType::i64)}};
  auto block_of = [&](const Impl::Unit& u, size_t i) -> Tensor {
    const models::ParameterInfo& info = u.infos[i];
    Tensor block = parameter(info.name);
    LIBAI_CHECK(block.defined(), "ZeRO: the checkpoint has no parameter ", info.name);
    LIBAI_CHECK(block.shape() == info.tensor->shape(), "ZeRO: the checkpoint's block of ",
                info.name, " is ", shape_str(block.shape()), ", this rank holds ",
                shape_str(info.tensor->shape()));
    return block.is_contiguous() ? block : block.clone_raw();
  };
  for (size_t ui = 0; ui < s.units.size(); ++ui) {
    Impl::Unit& u = s.units[ui];
    if (s.stage == 3) continue;  // only the owned blocks, below
    for (size_t i = 0; i < u.infos.size(); ++i) u.infos[i].tensor->copy_from(block_of(u, i));
  }
  for (auto& seg : s.segments) {
    const Impl::Unit& u = s.units[seg.unit];
    const std::string& name = u.infos[seg.index].name;
    if (s.stage == 3) {
      Tensor block = block_of(u, seg.index);
      seg.value.copy_from(flat_view(block, seg.begin, seg.end));
    }
    for (const std::string& key : keys) {
      Tensor t = state(name, key);
      if (!t.defined()) continue;
      if (key == "step") {
        loaded[seg.name + ".step"] = t.clone_raw();
        continue;
      }
      LIBAI_CHECK(t.numel() == u.infos[seg.index].tensor->numel(), "ZeRO: the checkpoint's ", key,
                  " of ", name, " has ", t.numel(), " elements, the parameter ",
                  u.infos[seg.index].tensor->numel());
      Tensor c = t.is_contiguous() ? t : t.clone_raw();
      loaded[seg.name + "." + key] = flat_view(c, seg.begin, seg.end).clone_raw();
    }
  }
  s.optimizer->load_state_tensors(loaded);
}

int64_t ZeroShards::unit_count() const { return int64_t(impl_->units.size()); }
int64_t ZeroShards::largest_unit() const {
  int64_t n = 0;
  for (const auto& u : impl_->units) n = std::max(n, u.numel);
  return n;
}
int64_t ZeroShards::owned_elements() const {
  int64_t n = 0;
  for (const auto& u : impl_->units) n += u.shard;
  return n;
}

}  // namespace libai::train
