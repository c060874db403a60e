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

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace libai::models {

// What every layer of one model shares.
struct LayerContext {
  Device device = Device::cpu();
  DType dtype = DType::f32;  // parameters and activations
  // The tensor-parallel group: parallel layers split their parameters over it and put its
  // collectives around their local computation. Null: one device.
  std::shared_ptr<comm::Communicator> tp;

  // Parameters left uninitialized rather than zeroed, for loads that read every one from a
  // checkpoint (load_model, load_stage: a parameter left unread fails the load): its pages are
  // first touched by its values (Note [Streaming packed loads] in models/model.cc).
  bool uninitialized_parameters = false;

  int tp_size() const { return tp ? tp->size() : 1; }
  int tp_rank() const { return tp ? tp->rank() : 0; }
  // The sub-group of tp made of `size` consecutive ranks that holds this rank (tp itself when
  // size is tp_size), made once per model and shared by its layers: creating a communicator
  // is a collective (and, under NCCL, costly), so every rank of tp must ask for the same sizes
  // in the same order, as layers built alike do. Note [Partly replicated parameters].
  std::shared_ptr<comm::Communicator> tp_subgroup(int size) const;

  // The sub-groups made so far, by size (shared by the copies of this context).
  std::shared_ptr<std::map<int, std::shared_ptr<comm::Communicator>>> subgroups =
      std::make_shared<std::map<int, std::shared_ptr<comm::Communicator>>>();
};

// Note [Partly replicated parameters]
// Most parameters are broadcast or split into tp_size equal blocks. Grouped-query attention
// with more tensor-parallel ranks than key/value heads (Megatron's and vLLM's layout) gives
// each rank its own query heads plus a copy of the one key/value head they use: rank r's
// block of the fused q/k/v projection is [its q rows | k | v], rows of the whole that are not
// one block and partly held by several ranks. Such a parameter lists every rank's rows
// (TpRows, along split_dim, in the block's order); a range held by several ranks has one
// owner, the lowest of them, which alone writes it to a checkpoint and counts it in a
// gradient norm. The copies must stay equal: they are initialised and loaded from the same
// rows of the whole, and their gradients are summed over the ranks that share them in the
// forward (Linear's ReplicatedRows), so every copy gets the whole model's gradient and the
// optimizer, which never looks at the layout, makes the same step on each.
struct TpRows {
  int64_t start = 0, length = 0;  // rows [start, start + length) of the whole along split_dim
  int owner = 0;                  // the lowest tp rank holding them
};

// How a parameter is laid out over the tensor-parallel group (its SBP signature on the tp
// axis): broadcast (every rank holds all of it) or split along one dim (rank r holds the r-th
// of tp_size equal blocks). Loaders and checkpoints use it to find each rank's slice.
struct ParameterInfo {
  std::string name;
  Tensor* tensor = nullptr;
  int split_dim = -1;  // -1: broadcast
  Shape logical_shape;  // the whole parameter's shape
  // The split dim was padded up to a multiple of tp_size (a vocabulary of 50257 over 2 ranks:
  // 25129 rows each, the last one zero): rank r holds rows [r * n, (r + 1) * n) of the
  // zero-padded whole, n = this rank's size of the dim.
  int tp_rank = 0, tp_size = 1;
  // Empty: rank r holds block r. Otherwise rows[r] is rank r's rows of the whole, in its
  // block's order (Note [Partly replicated parameters]); split_dim is then 0.
  std::vector<std::vector<TpRows>> rows;
  // Partly replicated: the flat element ranges [begin, end) of `tensor` that this rank owns
  // (its block's owned rows; a ZeRO segment's share of them), the ones it counts in a
  // gradient norm and writes to a sharded checkpoint.
  std::vector<std::pair<int64_t, int64_t>> owned_elements;

  bool split() const { return split_dim >= 0 && tp_size > 1; }
  bool partly_replicated() const { return !rows.empty() && tp_size > 1; }
};

// Rank `rank`'s block (shape block_shape) of a whole tensor laid out as `info` says; the
// padding of an uneven split is zero. Not split: `whole` itself.
Tensor tp_block_of(const Tensor& whole, const ParameterInfo& info, int rank, const Shape& block_shape);
// The whole tensor from every rank's block (in rank order); the padding of an uneven split is
// dropped, a partly replicated range taken from its owner.
Tensor whole_of_blocks(const std::vector<Tensor>& blocks, const ParameterInfo& info);
class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Parameters of this module and its children, depth first in registration order.
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  // The same with their tensor-parallel layout.
  std::vector<ParameterInfo> parameter_infos();
  // The parameter of that dotted name, or nullptr.
  Tensor* find_parameter(const std::string& name);
  int64_t parameter_count();
  // This module and every descendant, depth first, with dotted paths ("" for this one).
  std::vector<std::pair<std::string, Module*>> named_modules();
  // This module's dotted path from the root it was added under ("layers.3.attention"; "" for
  // a root). Set by add_module, so a layer can name its random streams (dropout) by path.
  const std::string& path() const { return path_; }
  // Sets requires_grad on every parameter (training) or clears it (inference).
  void set_requires_grad(bool value);

 protected:
  // A new parameter of logical shape `shape`, zero-filled, on ctx's device and dtype. With
  // split_dim >= 0 this rank holds its 1/tp_size block of that dim (InvalidArgument naming the
  // parameter when tp_size does not divide it).
  // pad_uneven: pad the split dim up to a multiple of tp_size instead (see ParameterInfo).
  Tensor& add_parameter(const std::string& name, const Shape& shape, const LayerContext& ctx,
                        int split_dim = -1, bool pad_uneven = false);
  // A parameter of logical shape `shape` split along dim 0 by `rows` (one list per tp rank,
  // each rank's lengths summing to the same block size; Note [Partly replicated parameters]).
  Tensor& add_parameter(const std::string& name, const Shape& shape, const LayerContext& ctx,
                        const std::vector<std::vector<TpRows>>& rows);
  // A child added under "" is transparent: its parameters and modules keep their own names
  // (a pipeline stage wrapping a model part, models/stages/stage.h).
  template <typename M>
  M& add_module(const std::string& name, std::unique_ptr<M> module) {
    M& ref = *module;
    module->set_path(path_.empty() || name.empty() ? path_ + name : path_ + "." + name);
    children_.emplace_back(name, std::move(module));
    return ref;
  }

 private:
  void collect(const std::string& prefix, std::vector<ParameterInfo>& out);
  void set_path(const std::string& path);
  std::string path_;
  struct Slot {
    ParameterInfo info;
    std::unique_ptr<Tensor> tensor;
  };
  std::vector<Slot> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

}  // namespace libai::models
