// PyTorch zip checkpoints (torch.save since torch 1.6: pytorch_model.bin, *.pth, *.pt), read
// without Python and without executing anything.
//
//   auto sd = checkpoint::load_torch_checkpoint("pytorch_model.bin");   // ordered (name, tensor)
//   auto ckpt = checkpoint::TorchCheckpoint::open("run/last.pth");       // tensors on demand
//   Tensor w = ckpt.tensor("model.encoder.weight");                      // zero-copy view
//
// The archive is `<prefix>/data.pkl` (the object) plus `<prefix>/data/<key>` (one stored entry
// per storage), where <prefix> is the first entry's folder. data.pkl is read by a restricted
// unpickler (pickle.h) whose only globals are an allow-list: collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter(_with_state),
// torch._tensor._rebuild_from_type_v2, torch.Tensor, torch.nn.parameter.Parameter and the
// storage types torch.{Float,Double,Half,BFloat16,Long,Int,Byte,Bool}Storage. Any other global
// (os.system, builtins.eval, ...) raises Unsupported naming it, before anything else happens.
//
// Tensors are views of the mapped storage entries with the pickled offset, size and stride;
// tensors that shared a storage in Python share one Storage here (tied weights). Nested
// containers are flattened with dotted names ({"model": {"w": t}} -> "model.w", list items
// by index); non-tensor leaves (ints, floats, strings, bools, None) are kept in other_values().
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace libai::checkpoint {

struct TorchTensorInfo {
  std::string storage_key;  // the entry <prefix>/data/<storage_key>
  DType dtype = DType::f32;
  Shape shape;
  Shape strides;  // in elements
  int64_t storage_offset = 0;
};

class TorchCheckpoint {
 public:
  static TorchCheckpoint open(const std::string& path);
  // Parses a copy of an in-memory file; `name` is used in errors.
  static TorchCheckpoint open_bytes(const void* data, size_t size, std::string name = "<memory>");

  // Flattened tensor names, in pickle (insertion) order.
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  const TorchTensorInfo& info(const std::string& name) const;  // NotFound
  Tensor tensor(const std::string& name) const;
  // Non-tensor leaves as (flattened name, Python-style text), e.g. ("epoch", "3").
  const std::vector<std::pair<std::string, std::string>>& other_values() const;
  const std::string& path() const;

  struct State;  // internal

 private:
  explicit TorchCheckpoint(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

std::vector<std::pair<std::string, Tensor>> load_torch_checkpoint(const std::string& path);

}  // namespace libai::checkpoint
