#include "models/parallel/data_parallel.h"

#include <map>
#include <mutex>

#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::models {

struct GradientReducer::State {
  struct Bucket {
    std::vector<Tensor*> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in `buffer`
    Tensor buffer;                 // flat, the parameters' dtype
    int64_t ready = 0;
    comm::WorkHandle work;
  };
  std::shared_ptr<comm::Communicator> group;
  GradientReducerOptions options;
  std::vector<Bucket> buckets;
  std::map<TensorImpl*, std::pair<size_t, size_t>> where;  // param -> (bucket, index)
  std::vector<std::vector<bool>> arrived;
  size_t next_launch = 0;
  bool enabled = true;
  int64_t launched_early = 0;
  std::mutex mutex;

  void copy_in(Bucket& b, size_t i, const Tensor& grad) {
    Tensor dst = ops::narrow(b.buffer, 0, b.offsets[i], b.params[i]->numel());
    dst.copy_from(ops::reshape(grad, {grad.numel()}));
  }

  void launch_ready() {
    while (next_launch < buckets.size()) {
      Bucket& b = buckets[next_launch];
      if (b.ready < int64_t(b.params.size())) return;
      b.work = group->all_reduce_async(b.buffer);
      ++next_launch;
    }
  }

  void on_gradient(TensorImpl* param, const Tensor& grad) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!enabled) return;
    auto it = where.find(param);
    if (it == where.end()) return;
    auto [bi, pi] = it->second;
    Bucket& b = buckets[bi];
    if (arrived[bi][pi]) return;  // a second backward before finish(): keep the first
    arrived[bi][pi] = true;
    copy_in(b, pi, grad);
    ++b.ready;
    launch_ready();
  }
};

GradientReducer::GradientReducer(Module& module, std::shared_ptr<comm::Communicator> group,
                                 GradientReducerOptions options)
    : state_(std::make_shared<State>()) {
  state_->group = std::move(group);
  state_->options = options;
  auto params = module.named_parameters();
  State::Bucket current;
  int64_t bytes = 0;
  auto close = [&] {
    if (current.params.empty()) return;
    const int64_t total = current.offsets.back() + current.params.back()->numel();
    current.buffer = Tensor::zeros({total}, current.params[0]->dtype(), current.params[0]->device());
    state_->buckets.push_back(std::move(current));
    current = State::Bucket();
    bytes = 0;
  };
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    Tensor* p = it->second;
    if (!current.params.empty() && current.params[0]->dtype() != p->dtype()) close();
    const int64_t offset = current.params.empty() ? 0 : current.offsets.back() + current.params.back()->numel();
    current.params.push_back(p);
    current.offsets.push_back(offset);
    state_->where[p->impl_ptr().get()] = {state_->buckets.size(), current.params.size() - 1};
    bytes += int64_t(p->nbytes());
    if (bytes >= options.bucket_bytes) close();
  }
  close();
  for (const auto& b : state_->buckets) state_->arrived.emplace_back(b.params.size(), false);
  std::weak_ptr<State> weak = state_;
  for (auto& [name, p] : params) {
    TensorImpl* key = p->impl_ptr().get();
    p->add_grad_ready_hook([weak, key](const Tensor& grad) {
      if (auto s = weak.lock()) s->on_gradient(key, grad);
    });
  }
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::set_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->enabled = enabled;
}

void GradientReducer::finish() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.launched_early = int64_t(s.next_launch);
  // Parameters that got no gradient contribute zeros; the rest of the buckets go now, in order.
  for (size_t bi = 0; bi < s.buckets.size(); ++bi) {
    auto& b = s.buckets[bi];
    for (size_t pi = 0; pi < b.params.size(); ++pi) {
      if (s.arrived[bi][pi]) continue;
      Tensor grad = b.params[pi]->grad();
      s.copy_in(b, pi, grad.defined() ? grad : Tensor::zeros(b.params[pi]->shape(), b.params[pi]->dtype()));
      s.arrived[bi][pi] = true;
      ++b.ready;
    }
  }
  s.launch_ready();
  const double scale = s.options.average ? 1.0 / s.group->size() : 1.0;
  autograd::NoGradGuard no_grad;
  for (size_t bi = 0; bi < s.buckets.size(); ++bi) {
    auto& b = s.buckets[bi];
    b.work->wait();
    for (size_t pi = 0; pi < b.params.size(); ++pi) {
      Tensor* p = b.params[pi];
      Tensor flat = ops::narrow(b.buffer, 0, b.offsets[pi], p->numel());
      Tensor g = ops::reshape(flat, p->shape()).clone_raw();
      p->set_grad(scale == 1.0 ? g : ops::scale(g, scale));
    }
    b.ready = 0;
    b.work.reset();
    std::fill(s.arrived[bi].begin(), s.arrived[bi].end(), false);
  }
  s.next_launch = 0;
}

int64_t GradientReducer::bucket_count() const { return int64_t(state_->buckets.size()); }
int64_t GradientReducer::launched_before_finish() const { return state_->launched_early; }

}  // namespace libai::models
