// ZeRO: the optimizer state (stage 1), the gradients (stage 2) and the parameters (stage 3) of
// one pipeline stage's rank sharded over its data-parallel group. train::StageStep drives it
// when TrainStepOptions::zero_stage > 0; the eager pipeline and the actor runtime's stage
// actors get it from the same place. docs/TRAINING.md, "ZeRO".
//
//   ZeroShards zero(stage, parts, optimizer.groups(), optimizer.options(), dp, tied_names);
//   // stage 2 and 3: hooks reduce-scatter each unit's gradients during backward
//   ... backward of a micro-batch on chunk c ...; zero.after_backward(c);
//   zero.reduce_gradients();            // stage 1: reduce-scatter the accumulated gradients
//   zero.sum_tied(tied_group);          // weights tied across stages
//   double norm = global_grad_norm(zero.grad_infos(norm_only), ...);
//   zero.optimizer().step();            // this rank's shard only
//   zero.gather_parameters();           // stage 1 and 2: every rank has the new weights
//   zero.zero_grad();
//
// Note [ZeRO partitions]
// A rank's trainable parameters are grouped in units: each transformer layer
// (models::TransformerLayer, every family's), each weight tied across pipeline stages on its
// own (both stages then partition it alike), and the rest of each part (embeddings, final norm,
// head) together. A unit's parameters lie end to end in registration order in one flat f32
// buffer, padded with zeros to a multiple of dp; data-parallel rank r owns elements
// [r U / dp, (r + 1) U / dp) of every unit U. Ownership is per unit rather than one range of
// the whole model so that a unit is the collective's unit: one reduce-scatter of a unit's
// gradients, one all-gather of its parameters, each rank's block contiguous.
//   stage 1: the parameters (whole, views into their unit's buffer) and the gradients are
//            those of ZeRO-0 until the step ends; then each unit's gradients are
//            reduce-scattered (summed, divided by dp) into this rank's f32 gradient shard and
//            the whole gradients freed; the optimizer (AdamW / SGD over 1-D views of the
//            shards, one per parameter segment, with its parameter's group) updates the owned
//            block; each unit is all-gathered back.
//   stage 2: as stage 1, but each unit is reduce-scattered as soon as backward has produced
//            all its gradients (every micro-batch, added into the shard), and the whole
//            gradients are freed then: at most one unit's whole gradients live at a time. The
//            collectives go in the order the units complete, which is the same on every
//            replica: they run the same program on the same graph, and the engine's order is a
//            function of the graph alone. What a backward left incomplete (a parameter without
//            a gradient) is reduced after it, in unit order.
//   stage 3: as stage 2, and between uses each unit keeps only its owned block of the
//            parameters: a transformer layer's unit is all-gathered when its forward starts
//            and freed when it ends (models::ParameterFetch in TrainingMode), gathered again
//            by its backward (an identity node on the layer's output) and freed once its
//            gradients are reduce-scattered; the rest of a part is gathered around the part's
//            forward and backward. The tensors keep their Storage while freed (its memory is
//            returned and taken again), so the autograd tape's views stay valid.
// Model-state bytes per rank with f32 AdamW (Psi parameters of the rank, N = dp):
//   stage 0: 16 Psi; stage 1: 8 Psi + 12 Psi / N (parameters, whole gradients until the step,
//   m, v and the gradient shard); stage 2: 4 Psi + 12 Psi / N; stage 3: 16 Psi / N; plus what
//   is in flight (Note [ZeRO memory model] in schedule/zero_memory.h: zero_state_bytes).
// The updates are elementwise, so sharding changes no arithmetic; the gradients are summed by
// reduce-scatter instead of all-reduce, in another order (f32 rounding, ~1e-7 relative).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/training_mode.h"
#include "runtime/comm/communicator.h"
#include "schedule/zero_memory.h"
#include "train/optimizer.h"

namespace libai::train {

// What this rank owns of one parameter: a flat range of its tensor-parallel block (the
// parameter as this rank's Module holds it), with the parameter's values and optimizer state
// over that range. Checkpoints are written from these (train/checkpoint/sharded.h).
struct OwnedSlice {
  models::ParameterInfo info;        // name, split dim, logical shape, tp rank / size
  Shape local_shape;                 // the tp block's shape (the Module's tensor)
  int64_t begin = 0, end = 0;        // elements [begin, end) of the block, row-major
  Tensor values;                     // 1-D, end - begin elements: the parameter (live)
  std::map<std::string, Tensor> state;  // "exp_avg", "exp_avg_sq" (1-D, live), "step" (i64
                                        // scalar) / "momentum_buffer"
};

// Model-state bytes per rank of the formulas in Note [ZeRO partitions]: schedule/zero_memory.h
// (Note [ZeRO memory model]), which the planner and `plan` use too.
using schedule::zero_state_bytes;
using schedule::ZeroMemory;

class ZeroShards {
 public:
  // parts: this rank's chunks (their trainable parameters are `groups`' parameters);
  // optimizer: the kind and hyper-parameters of the shard optimizer; dp: this slot in every
  // replica (size >= 1); tied: names of weights tied across stages (each a unit of its own).
  // Stage 1-3. Collective over nothing; the parameters' current values are kept.
  ZeroShards(int stage, const std::vector<models::Model*>& parts,
             const std::vector<ParamGroup>& groups, const OptimizerOptions& optimizer,
             std::shared_ptr<comm::Communicator> dp, const std::set<std::string>& tied);
  ~ZeroShards();
  ZeroShards(const ZeroShards&) = delete;
  ZeroShards& operator=(const ZeroShards&) = delete;

  int stage() const;
  // Stage 3: the part-level units of chunk `chunk` (embeddings, head, tied weights) gathered
  // around its forward / before its backward, and the layers' fetcher for TrainingMode::fetch
  // (null below stage 3). Nothing below stage 3.
  void before_forward(int chunk);
  void after_forward(int chunk);
  void before_backward(int chunk);
  models::ParameterFetch* fetcher();
  // Stage 2, 3: the units of chunk `chunk` whose gradients did not all arrive during the
  // backward just run are reduce-scattered now (missing gradients count as zeros), in unit
  // order; stage 3 frees every gathered unit of the chunk. Stage 1: nothing.
  void after_backward(int chunk);
  // Stage 1: every unit's accumulated gradients reduce-scattered into the shards, the whole
  // gradients freed. Stage 2, 3: nothing left to do.
  void reduce_gradients();
  // The shards of weights tied across stages summed over `tied` (the first and last stage).
  void sum_tied(comm::Communicator& tied);
  // Per owned parameter segment: a ParameterInfo whose tensor is the 1-D segment and whose
  // .grad() is its gradient shard (split_dim kept: Note [Each element counted once]).
  // skip_tied: leave the tied weights out (the last stage's copy in the norm).
  std::vector<models::ParameterInfo> grad_infos(bool skip_tied = false);
  // The optimizer over this rank's segments (its groups mirror the given ones; the caller
  // sets their lr).
  Optimizer& optimizer();
  // Stage 1, 2: each unit all-gathered, so every rank holds the updated parameters.
  // Stage 3: nothing (the next use gathers).
  void gather_parameters();
  // Clears the gradient shards (and, stage 1, any whole gradient left).
  void zero_grad();

  // Stage 3: every unit gathered (evaluation, checkpoints, export) / freed again; a collective
  // of the dp group. Stage 1, 2: nothing. WholeParameters does both around a scope.
  void fetch_all();
  void release_all();

  // What this rank owns, per parameter segment, in unit order (checkpoints).
  std::vector<OwnedSlice> owned();
  // Loads this rank's shards (parameter values and optimizer state) from whole tensors:
  // `parameter(name)` and `state(name, key)` return the tp block of that parameter (the
  // Module's shape) or an undefined tensor when the checkpoint has none (state: a fresh
  // optimizer). Stage 1, 2 gather the parameters after.
  using BlockSource = std::function<Tensor(const std::string& name)>;
  using StateSource = std::function<Tensor(const std::string& name, const std::string& key)>;
  void load(const BlockSource& parameter, const StateSource& state, int64_t optimizer_steps);

  // Counts, for tests and the memory benchmark.
  int64_t unit_count() const;
  int64_t largest_unit() const;  // elements, padded
  int64_t owned_elements() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Every parameter whole for a scope (ZeRO-3: fetch_all, then release_all however the scope
// ends); nothing for null or below stage 3. Every dp rank enters the scope together.
class WholeParameters {
 public:
  explicit WholeParameters(ZeroShards* zero) : zero_(zero) {
    if (zero_) zero_->fetch_all();
  }
  ~WholeParameters() {
    if (zero_) zero_->release_all();
  }
  WholeParameters(const WholeParameters&) = delete;
  WholeParameters& operator=(const WholeParameters&) = delete;

 private:
  ZeroShards* zero_;
};

}  // namespace libai::train
