// Define-by-run autograd. An op that produced `out` from inputs records a Node holding the
// edges to its inputs and a backward function; `backward(loss)` walks the tape once in
// topological order, accumulates gradients into leaves' `.grad`, and calls each leaf's
// gradient-ready hooks as soon as its gradient is final (for overlapped data-parallel
// reduction).
//
//   Tensor y = ops::mul(x, w);              // ops call autograd::record(...)
//   autograd::backward(ops::sum(y));
//   w.grad();
//   { autograd::NoGradGuard guard; ... }     // nothing recorded in this scope
//   Tensor h = autograd::checkpoint([&](const std::vector<Tensor>& in) { return block(in[0]); },
//                                   {x});    // keeps only x; block re-runs in backward
//
// Note [Checkpoint contract]: checkpoint(fn, inputs) runs fn without recording and records
// one node; its backward re-runs fn on detached copies of the inputs with recording on and
// backpropagates the incoming gradient through that graph. Parameters reached inside fn get
// their .grad accumulated and their gradient-ready hooks called by that inner backward, as a
// normal backward would; the inputs' gradients flow on to the outer graph. So fn must be a
// pure function of its inputs, the parameters it reads and the state it captures by value:
// every tensor with history it needs must be one of `inputs` (a captured one would be
// backpropagated through twice), and thread state it reads (models' TrainingMode: dropout's
// key, autocast) may differ at backward time, so fn captures it and re-establishes it.
// Forward and recomputation then compute the same values bitwise, and so do the gradients.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace libai::autograd {

// Gradient w.r.t. each input, in input order; an undefined Tensor means "no gradient".
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Edge {
  std::shared_ptr<Node> node;        // the input was produced by an op...
  std::shared_ptr<TensorImpl> leaf;  // ...or it is a leaf that requires grad
  bool defined() const { return node != nullptr || leaf != nullptr; }
};

struct Node {
  std::string name;
  std::vector<Edge> edges;  // one per input
  BackwardFn backward;
  Shape output_shape;
  DType output_dtype = DType::f32;
};

bool grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Turns recording on or off for a scope (a checkpoint's recomputation inside backward).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// True when recording is on and some input requires a gradient.
bool needs_grad(const std::vector<Tensor>& inputs);

// Attaches a backward node to `output` when needs_grad(inputs); returns `output`.
Tensor record(Tensor output, const char* name, const std::vector<Tensor>& inputs,
              BackwardFn backward);

// Runs the backward pass from `root`. `grad` defaults to ones for a one-element root.
void backward(const Tensor& root, const Tensor& grad = Tensor());

// Gradients of `root` w.r.t. `inputs` (leaves), returned instead of accumulated in `.grad`.
std::vector<Tensor> grad(const Tensor& root, const std::vector<Tensor>& inputs,
                         const Tensor& grad_output = Tensor());

// fn(inputs) whose intermediate activations are recomputed in backward instead of kept
// (Note [Checkpoint contract]). Inputs may be undefined; fn returns one tensor.
using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

// Elementwise a + b of equal shapes, registered by ops/ (runtime/ has no kernels).
using AddFn = Tensor (*)(const Tensor& a, const Tensor& b);
void register_add(AddFn fn);

}  // namespace libai::autograd
