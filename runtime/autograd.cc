#include "runtime/autograd.h"

#include <unordered_map>
#include <utility>

namespace libai::autograd {
namespace {

thread_local bool t_grad_enabled = true;
AddFn g_add = nullptr;

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  LIBAI_ASSERT(g_add != nullptr, "ops/ has not registered the gradient accumulator");
  LIBAI_ASSERT(a.shape() == b.shape(), "gradient shapes differ: ", shape_str(a.shape()), " vs ",
               shape_str(b.shape()));
  return g_add(a, b);
}

struct Pending {
  Tensor grad;
  int remaining = 0;
};

// Counts, for every node and leaf reachable from `root`, how many edges point at it.
void count_dependencies(const std::shared_ptr<Node>& root,
                        std::unordered_map<Node*, Pending>& nodes,
                        std::unordered_map<TensorImpl*, Pending>& leaves) {
  std::vector<Node*> stack{root.get()};
  nodes[root.get()];
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->edges) {
      if (e.node) {
        auto [it, inserted] = nodes.try_emplace(e.node.get());
        it->second.remaining++;
        if (inserted) stack.push_back(e.node.get());
      } else if (e.leaf) {
        leaves[e.leaf.get()].remaining++;
      }
    }
  }
}

// The engine: Kahn's order over the tape. `on_leaf` receives each leaf's final gradient.
template <typename OnLeaf>
void run_backward(const Tensor& root, const Tensor& grad_output, OnLeaf&& on_leaf) {
  LIBAI_CHECK(root.defined(), "backward(): undefined tensor");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    LIBAI_CHECK(root.numel() == 1, "backward(): the root has shape ", shape_str(root.shape()),
                "; pass a gradient for a root that is not a scalar");
    seed = Tensor::ones(root.shape(), root.dtype(), root.device());
  }
  LIBAI_CHECK(seed.shape() == root.shape(), "backward(): gradient shape ", shape_str(seed.shape()),
              " differs from root shape ", shape_str(root.shape()));
  NoGradGuard no_grad;
  if (root.is_leaf()) {
    LIBAI_CHECK(root.requires_grad(), "backward(): the root does not require grad");
    on_leaf(root.impl_ptr(), seed);
    return;
  }
  std::unordered_map<Node*, Pending> nodes;
  std::unordered_map<TensorImpl*, Pending> leaves;
  count_dependencies(root.grad_fn(), nodes, leaves);
  nodes[root.grad_fn().get()].grad = seed;
  // Keep nodes alive while we walk: edges own them, but we pop them from the map as we go.
  std::vector<std::shared_ptr<Node>> ready{root.grad_fn()};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Tensor g = std::move(nodes[node.get()].grad);
    std::vector<Tensor> input_grads;
    if (g.defined()) input_grads = node->backward(g);
    LIBAI_ASSERT(input_grads.empty() || input_grads.size() == node->edges.size(), "op '",
                 node->name, "' returned ", input_grads.size(), " gradients for ",
                 node->edges.size(), " inputs");
    for (size_t i = 0; i < node->edges.size(); ++i) {
      const Edge& e = node->edges[i];
      Tensor gi = input_grads.empty() ? Tensor() : input_grads[i];
      if (e.node) {
        Pending& p = nodes[e.node.get()];
        if (gi.defined()) {
          LIBAI_ASSERT(gi.shape() == e.node->output_shape, "op '", node->name,
                       "' gave a gradient of shape ", shape_str(gi.shape()), " to op '",
                       e.node->name, "' whose output has shape ", shape_str(e.node->output_shape));
          p.grad = accumulate(p.grad, gi);
        }
        if (--p.remaining == 0) ready.push_back(e.node);
      } else if (e.leaf) {
        Pending& p = leaves[e.leaf.get()];
        if (gi.defined()) {
          LIBAI_ASSERT(gi.shape() == e.leaf->shape, "op '", node->name,
                       "' gave a gradient of shape ", shape_str(gi.shape()), " to a leaf of shape ",
                       shape_str(e.leaf->shape));
          p.grad = accumulate(p.grad, gi);
        }
        // Handed over, not kept: a leaf's gradient must not outlive the leaf's hooks here
        // (ZeRO frees it from them once reduced: train/zero.h).
        if (--p.remaining == 0 && p.grad.defined()) on_leaf(e.leaf, std::exchange(p.grad, {}));
      }
    }
  }
}

}  // namespace

bool grad_enabled() { return t_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

GradModeGuard::GradModeGuard(bool enabled) : previous_(t_grad_enabled) { t_grad_enabled = enabled; }
GradModeGuard::~GradModeGuard() { t_grad_enabled = previous_; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && (t.requires_grad() || !t.is_leaf())) return true;
  return false;
}

namespace {

// record() without its check: checkpoint needs a node even when no input wants a gradient,
// for the parameters inside.
Tensor attach(Tensor output, const char* name, const std::vector<Tensor>& inputs,
              BackwardFn backward) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->backward = std::move(backward);
  node->output_shape = output.shape();
  node->output_dtype = output.dtype();
  node->edges.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && !t.is_leaf())
      e.node = t.grad_fn();
    else if (t.defined() && t.requires_grad())
      e.leaf = t.impl_ptr();
    node->edges.push_back(std::move(e));
  }
  // The output is a fresh alias so that recording never mutates a tensor the caller holds.
  Tensor result = output.grad_fn() ? output.detach() : output;
  result.impl().grad_fn = std::move(node);
  result.impl().requires_grad = true;
  return result;
}

}  // namespace

Tensor record(Tensor output, const char* name, const std::vector<Tensor>& inputs,
              BackwardFn backward) {
  if (!needs_grad(inputs)) return output;
  return attach(std::move(output), name, inputs, std::move(backward));
}

void backward(const Tensor& root, const Tensor& grad_output) {
  run_backward(root, grad_output, [](const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
    Tensor previous = leaf->grad ? Tensor(leaf->grad) : Tensor();
    // Own the gradient: a backward function may return a view of a shared buffer. A tensor
    // nothing else refers to (the engine hands it over) is taken as it is, not copied: a
    // copy would hold a second gradient of the largest parameters at once.
    const bool sole = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                      g.offset() == 0 && g.is_contiguous() && g.nbytes() == g.storage()->nbytes &&
                      !g.grad_fn();
    Tensor total = previous.defined() ? accumulate(previous, g) : sole ? g : g.clone_raw();
    leaf->grad = total.impl_ptr();
    for (const GradHook& hook : leaf->grad_ready_hooks) hook(total);
  });
}

std::vector<Tensor> grad(const Tensor& root, const std::vector<Tensor>& inputs,
                         const Tensor& grad_output) {
  std::unordered_map<TensorImpl*, Tensor> found;
  run_backward(root, grad_output, [&](const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
    found[leaf.get()] = g;
  });
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    auto it = found.find(t.impl_ptr().get());
    out.push_back(it == found.end() ? Tensor() : it->second);
  }
  return out;
}

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return fn(inputs);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(inputs);
  }
  LIBAI_CHECK(out.defined(), "checkpoint: the function returned an undefined tensor");
  // Which inputs the outer graph wants a gradient for, and their values without history.
  std::vector<Tensor> detached;
  std::vector<bool> wanted;
  for (const Tensor& t : inputs) {
    detached.push_back(t.defined() ? t.detach() : Tensor());
    wanted.push_back(t.defined() && (t.requires_grad() || !t.is_leaf()));
  }
  return attach(out, "checkpoint", inputs, [fn, detached, wanted](const Tensor& g) {
    std::vector<Tensor> local;
    for (size_t i = 0; i < detached.size(); ++i) {
      // A fresh alias per backward, so that its .grad starts empty.
      Tensor t = detached[i].defined() ? detached[i].detach() : Tensor();
      if (wanted[i]) t.set_requires_grad(true);
      local.push_back(t);
    }
    Tensor recomputed;
    {
      GradModeGuard recording(true);
      recomputed = fn(local);
    }
    std::vector<Tensor> grads(local.size());
    if (recomputed.requires_grad()) {
      backward(recomputed, g);  // parameters: .grad and hooks, as in a plain backward
      for (size_t i = 0; i < local.size(); ++i)
        if (wanted[i]) grads[i] = local[i].grad();
    }
    return grads;
  });
}

void register_add(AddFn fn) { g_add = fn; }

}  // namespace libai::autograd
