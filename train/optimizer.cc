// AdamW and SGD over parameter groups: the state each keeps per parameter, its checkpoint
// form, and one fused kernel call per parameter and step (ops/optimizer.h).
#include "train/optimizer.h"

#include <set>
#include <utility>

#include "ops/optimizer.h"

namespace libai::train {
namespace {

// A gradient the kernels can take: f32 with the parameter's shape, made contiguous.
Tensor kernel_grad(const std::string& name, const Tensor& param, const Tensor& grad) {
  LIBAI_CHECK(grad.dtype() == DType::f32, "optimizer: gradient of ", name, " is ", grad.dtype(),
              ", expected f32 (unscale or cast it before the step)");
  LIBAI_CHECK(grad.shape() == param.shape(), "optimizer: gradient of ", name, " has shape ",
              shape_str(grad.shape()), ", the parameter ", shape_str(param.shape()));
  return grad.is_contiguous() ? grad : grad.clone_raw();
}

Tensor step_tensor(int64_t step) { return Tensor::from_vector<int64_t>({step}, {}); }

int64_t read_step(const std::map<std::string, Tensor>& state, const std::string& key) {
  auto it = state.find(key);
  LIBAI_CHECK(it != state.end(), "optimizer state: '", key, "' is missing");
  LIBAI_CHECK(it->second.defined() && it->second.numel() == 1 && !is_floating(it->second.dtype()),
              "optimizer state: '", key, "' must be one integer, got ",
              it->second.defined() ? shape_str(it->second.shape()) : std::string("undefined"));
  const int64_t step = it->second.item<int64_t>();
  LIBAI_CHECK(step >= 0, "optimizer state: '", key, "' is negative (", step, ")");
  return step;
}

// A private copy of state[key], checked against its parameter.
Tensor read_like(const std::map<std::string, Tensor>& state, const std::string& key,
                 const Tensor& param) {
  const Tensor& t = state.at(key);
  LIBAI_CHECK(t.defined() && t.dtype() == DType::f32 && t.shape() == param.shape(),
              "optimizer state: '", key, "' is ", t.defined() ? dtype_name(t.dtype()) : "undefined",
              " of shape ", t.defined() ? shape_str(t.shape()) : "-", ", expected f32 of shape ",
              shape_str(param.shape()));
  Tensor copy = Tensor::empty(param.shape(), DType::f32, param.device());
  copy.copy_from(t);
  return copy;
}

// Every key must belong to a parameter of the optimizer (or be "step").
void check_known_keys(const std::map<std::string, Tensor>& state,
                      const std::set<std::string>& known) {
  for (const auto& [key, tensor] : state)
    LIBAI_CHECK(key == "step" || known.contains(key), "optimizer state: '", key,
                "' names no state of this optimizer's parameters");
}

struct NamedParam {
  std::string name;
  Tensor* tensor;
  ParamGroup* group;
};

class GroupedOptimizer : public Optimizer {
 public:
  using Optimizer::Optimizer;

 protected:
  // Every parameter with its group, in group order.
  std::vector<NamedParam> parameters() {
    std::vector<NamedParam> out;
    for (auto& group : groups_)
      for (size_t i = 0; i < group.params.size(); ++i)
        out.push_back({group.names[i], group.params[i], &group});
    return out;
  }
};

class AdamW final : public GroupedOptimizer {
 public:
  OptimizerOptions options() const override { return options_; }
  AdamW(std::vector<ParamGroup> groups, const OptimizerOptions& options)
      : GroupedOptimizer(std::move(groups)), options_(options) {}

  void step() override {
    for (auto& [name, param, group] : parameters()) {
      Tensor grad = param->grad();
      if (!grad.defined()) continue;
      grad = kernel_grad(name, *param, grad);
      auto it = state_.find(name);
      // A parameter's state starts at zeros on its first gradient; it is kept only once
      // its first update went through.
      State s = it != state_.end()
                    ? it->second
                    : State{Tensor::zeros(param->shape(), DType::f32, param->device()),
                            Tensor::zeros(param->shape(), DType::f32, param->device()), 0};
      ops::adamw_update(*param, grad, s.exp_avg, s.exp_avg_sq,
                        {.lr = group->lr,
                         .beta1 = options_.beta1,
                         .beta2 = options_.beta2,
                         .eps = options_.eps,
                         .weight_decay = group->weight_decay,
                         .step = s.step + 1,
                         .bias_correction = options_.bias_correction});
      ++s.step;
      state_[name] = s;
    }
    ++steps_taken_;
  }

  std::map<std::string, Tensor> state_tensors() override {
    std::map<std::string, Tensor> out{{"step", step_tensor(steps_taken_)}};
    for (auto& [name, s] : state_) {
      out[name + ".exp_avg"] = s.exp_avg;
      out[name + ".exp_avg_sq"] = s.exp_avg_sq;
      out[name + ".step"] = step_tensor(s.step);
    }
    return out;
  }

  void load_state_tensors(const std::map<std::string, Tensor>& state) override {
    std::map<std::string, State> loaded;
    std::set<std::string> known;
    for (auto& [name, param, group] : parameters()) {
      const std::string keys[3] = {name + ".exp_avg", name + ".exp_avg_sq", name + ".step"};
      const int present =
          int(state.contains(keys[0])) + state.contains(keys[1]) + state.contains(keys[2]);
      known.insert(keys, keys + 3);
      if (present == 0) continue;  // never stepped (no gradient yet)
      LIBAI_CHECK(present == 3, "optimizer state of ", name, ": needs ", keys[0], ", ", keys[1],
                  " and ", keys[2], ", got ", present, " of them");
      State& s = loaded[name];
      s.exp_avg = read_like(state, keys[0], *param);
      s.exp_avg_sq = read_like(state, keys[1], *param);
      s.step = read_step(state, keys[2]);
    }
    check_known_keys(state, known);
    steps_taken_ = read_step(state, "step");
    state_ = std::move(loaded);
  }

 private:
  struct State {
    Tensor exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  OptimizerOptions options_;
  std::map<std::string, State> state_;  // by parameter name
};

class Sgd final : public GroupedOptimizer {
 public:
  OptimizerOptions options() const override { return options_; }
  Sgd(std::vector<ParamGroup> groups, const OptimizerOptions& options)
      : GroupedOptimizer(std::move(groups)), options_(options) {}

  void step() override {
    for (auto& [name, param, group] : parameters()) {
      Tensor grad = param->grad();
      if (!grad.defined()) continue;
      grad = kernel_grad(name, *param, grad);
      Tensor buffer;
      bool first = false;
      if (options_.momentum != 0) {
        auto it = buffers_.find(name);
        first = it == buffers_.end();
        buffer = first ? Tensor::empty(param->shape(), DType::f32, param->device()) : it->second;
      }
      ops::sgd_update(*param, grad, buffer,
                      {.lr = group->lr,
                       .momentum = options_.momentum,
                       .dampening = options_.dampening,
                       .weight_decay = group->weight_decay,
                       .nesterov = options_.nesterov,
                       .first_step = first});
      if (first) buffers_[name] = buffer;
    }
    ++steps_taken_;
  }

  std::map<std::string, Tensor> state_tensors() override {
    std::map<std::string, Tensor> out{{"step", step_tensor(steps_taken_)}};
    for (auto& [name, buffer] : buffers_) out[name + ".momentum_buffer"] = buffer;
    return out;
  }

  void load_state_tensors(const std::map<std::string, Tensor>& state) override {
    std::map<std::string, Tensor> loaded;
    std::set<std::string> known;
    for (auto& [name, param, group] : parameters()) {
      const std::string key = name + ".momentum_buffer";
      if (options_.momentum != 0) known.insert(key);
      if (options_.momentum != 0 && state.contains(key))
        loaded[name] = read_like(state, key, *param);
    }
    check_known_keys(state, known);
    steps_taken_ = read_step(state, "step");
    buffers_ = std::move(loaded);
  }

 private:
  OptimizerOptions options_;
  std::map<std::string, Tensor> buffers_;  // by parameter name; absent until its first step
};

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {}
Optimizer::~Optimizer() = default;

void Optimizer::zero_grad() {
  for (auto& group : groups_)
    for (Tensor* param : group.params) param->zero_grad();
}

std::vector<std::string> parameter_state_keys(const OptimizerOptions& options) {
  if (options.kind == OptimizerKind::adamw) return {"exp_avg", "exp_avg_sq", "step"};
  if (options.momentum != 0) return {"momentum_buffer"};
  return {};
}

std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups,
                                          const OptimizerOptions& options) {
  std::set<const TensorImpl*> seen;
  std::set<std::string> names;
  for (size_t g = 0; g < groups.size(); ++g) {
    const ParamGroup& group = groups[g];
    LIBAI_CHECK(group.names.size() == group.params.size(), "optimizer: parameter group ", g,
                " has ", group.names.size(), " names for ", group.params.size(), " parameters");
    LIBAI_CHECK(group.lr >= 0 && group.weight_decay >= 0, "optimizer: parameter group ", g,
                " has lr ", group.lr, " and weight_decay ", group.weight_decay, " (expected >= 0)");
    for (size_t i = 0; i < group.params.size(); ++i) {
      const std::string& name = group.names[i];
      const Tensor* param = group.params[i];
      LIBAI_CHECK(param != nullptr && param->defined(), "optimizer: parameter ", name,
                  " is undefined");
      LIBAI_CHECK(param->dtype() == DType::f32, "optimizer: parameter ", name, " is ",
                  param->dtype(), "; the optimizer updates f32 (master) weights");
      LIBAI_CHECK(param->is_contiguous(), "optimizer: parameter ", name, " of shape ",
                  shape_str(param->shape()), " is not contiguous");
      LIBAI_CHECK(seen.insert(param->impl_ptr().get()).second && names.insert(name).second,
                  "optimizer: parameter ", name, " appears twice in the groups");
    }
  }
  LIBAI_CHECK(options.eps >= 0, "optimizer: eps must be >= 0, got ", options.eps);
  if (options.kind == OptimizerKind::adamw) {
    LIBAI_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
                "optimizer: AdamW betas must be in [0, 1), got (", options.beta1, ", ",
                options.beta2, ")");
    return std::make_unique<AdamW>(std::move(groups), options);
  }
  LIBAI_CHECK(options.momentum >= 0, "optimizer: SGD momentum must be >= 0, got ",
              options.momentum);
  LIBAI_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
              "optimizer: SGD nesterov needs momentum > 0 and dampening 0, got momentum ",
              options.momentum, " and dampening ", options.dampening);
  return std::make_unique<Sgd>(std::move(groups), options);
}

}  // namespace libai::train
