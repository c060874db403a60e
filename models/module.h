// Module: a layer or a model, owning named parameters and child modules, like torch.nn.Module
// without hooks. Names are dotted paths ("layers.3.attention.qkv.weight"); they are this
// project's own names, and each model's loader maps a checkpoint's names onto them.
//
//   class Mlp : public Module {
//    public:
//     explicit Mlp(const LayerContext& ctx, int64_t hidden)
//         : fc1_(add_module("fc1", std::make_unique<Linear>(ctx, hidden, 4 * hidden))) ...
//   };
//   for (auto& [name, tensor] : model.named_parameters()) ...
//   load_parameters(model, source);   // models/weights.h
//
// Modules are neither copyable nor movable: parents hold pointers to their children's
// parameters. Layers take one LayerContext (device, dtype, later the tensor-parallel group)
// instead of long constructor lists.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace libai::models {

// What every layer of one model shares.
struct LayerContext {
  Device device = Device::cpu();
  DType dtype = DType::f32;  // parameters and activations
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Parameters of this module and its children, depth first in registration order.
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  // The parameter of that dotted name, or nullptr.
  Tensor* find_parameter(const std::string& name);
  int64_t parameter_count();
  // Sets requires_grad on every parameter (training) or clears it (inference).
  void set_requires_grad(bool value);

 protected:
  // A new parameter of `shape`, zero-filled, on ctx's device and dtype.
  Tensor& add_parameter(const std::string& name, const Shape& shape, const LayerContext& ctx);
  template <typename M>
  M& add_module(const std::string& name, std::unique_ptr<M> module) {
    M& ref = *module;
    children_.emplace_back(name, std::move(module));
    return ref;
  }

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

}  // namespace libai::models
