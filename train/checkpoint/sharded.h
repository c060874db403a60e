// Sharded training checkpoints: every rank writes what it owns (train/zero.h's OwnedSlice:
// a flat range of a parameter's tensor-parallel block with its optimizer state), nothing is
// gathered, and a reader presents whole tensors again, so a checkpoint saved at one layout
// loads at any other. docs/CHECKPOINTS.md, "Sharded checkpoints".
//
//   // every world rank, between steps:
//   save_sharded_checkpoint(out, checkpoint_name(progress.iteration), step.owned_slices(),
//                           world.get(), {.dp = 2, .pp = 2, .zero_stage = 1}, *parts[0],
//                           optimizer, steps, step.scaler(), progress, 3, {.schedule = &s});
//   // any layout, either format (model.safetensors + optimizer.safetensors, or sharded):
//   auto reader = CheckpointReader::open(folder);
//   Tensor whole = reader.parameter("layers.0.mlp.up.weight");     // logical shape
//   Tensor mine = tp_block(whole, info, info.tensor->shape());      // this rank's block
//
// Note [Sharded checkpoint layout]
// A folder output_dir/model_NNNNNNN/ holds
//   config.json, trainer.json   as the whole format writes them (tokenizer assets too)
//   shards/rank_NNNNN.safetensors
//                               one per world rank that owns something: per piece the values
//                               "p/<begin>/<name>" (1-D, end - begin elements of the tp block,
//                               row-major) and its optimizer state "s/<key>/<begin>/<name>"
//                               (1-D likewise; "step" an i64 scalar). The header's
//                               __metadata__ "pieces" describes each piece as JSON (name,
//                               logical shape, split dim, tp rank / size, local shape, range,
//                               keys): the shard is its own index.
//   layout.json                 format + version; the layout of the save (dp, tp, pp,
//                               virtual stages, zero stage, world size); the files; per
//                               parameter its name, logical shape, dtype and pieces (file,
//                               key, split dim, tp rank / size, local shape, [begin, end)), and
//                               the same per optimizer-state key.
// World rank 0 builds layout.json from the shards' headers after every rank has written and
// synced its file (a collective over the world communicator), validates it as a reader would,
// then publishes the folder exactly as Note [Checkpoint atomicity] says: one temp folder
// .tmp-<name>-sharded (created by rank 0 before anyone writes), fsynced, renamed into place,
// last_checkpoint rewritten, old folders pruned. The folder must be one file system every rank
// sees (a shared one across nodes), as train.output_dir must be.
//
// Reading: a tp block is assembled from its pieces (which must tile [0, numel) exactly), the
// blocks along the split dim give the padded whole, and an uneven split's padding is dropped.
// Every piece is checked against its file before any tensor is made: a damaged folder is one
// error naming the file and what is wrong. Nothing executes code.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "train/checkpoint/gathered.h"
#include "train/stage_step.h"
#include "train/zero.h"

namespace libai::train {

// The parallel layout a sharded checkpoint was saved at (recorded; loading never needs it).
struct ShardedLayout {
  int dp = 1, tp = 1, pp = 1;
  int virtual_stages = 1;  // chunks per device
  int zero_stage = 0;
};

// Collective over `world` (null: one rank): writes output_dir/name in the sharded format from
// every rank's `slices` (a rank with none writes no shard). World rank 0 also writes
// config.json (from `model`), the assets and trainer.json (`optimizer`'s groups,
// `optimizer_steps`, `scaler`, `progress`), keeps at most max_to_keep numbered folders, and
// every rank returns once the checkpoint is complete, or throws when any rank failed.
// whole_weights: world rank 0 also writes model.safetensors (the whole parameters in the libai
// layout, assembled from the shards) so that models::load_model, `generate` and `convert` read
// the folder as a model (graph mode's model_final and model_best); resuming still reads the
// shards. `slices`' tensors are read only (live views are fine: no step runs meanwhile).
std::filesystem::path save_sharded_checkpoint(
    const std::filesystem::path& output_dir, const std::string& name,
    const std::vector<OwnedSlice>& slices, comm::Communicator* world, const ShardedLayout& layout,
    const models::Model& model, Optimizer& optimizer, int64_t optimizer_steps,
    const GradScaler* scaler, const TrainingProgress& progress, int max_to_keep,
    const SaveOptions& options = {}, bool whole_weights = false);

// model_NNNNNNN (periodic, for resuming) rather than model_final / model_best (a model too,
// written with whole_weights).
bool is_numbered_checkpoint(const std::string& name);

// True when `folder` holds layout.json (the sharded format).
bool is_sharded_checkpoint(const std::filesystem::path& folder);
// last_checkpoint()'s test of a sharded folder: layout.json parses and every shard it names
// exists with a parseable header (and trainer.json parses).
bool sharded_checkpoint_complete(const std::filesystem::path& folder);

// Whole tensors of a checkpoint folder of either format, by this project's parameter names.
class CheckpointReader {
 public:
  // Reads and validates the folder's metadata (and, sharded, every piece against its file).
  static CheckpointReader open(const std::filesystem::path& folder);

  const std::filesystem::path& folder() const;
  bool sharded() const;
  const TrainingProgress& progress() const;  // trainer.json (loss scale included)
  int64_t optimizer_steps() const;           // trainer.json's optimizer_steps
  // Sharded: the layout it was saved at; whole: {} (one device's).
  const ShardedLayout& saved_layout() const;

  std::vector<std::string> parameter_names() const;  // sorted
  bool has_parameter(const std::string& name) const;
  Shape parameter_shape(const std::string& name) const;
  // The whole parameter (logical shape, padding dropped); NotFound naming it when absent.
  Tensor parameter(const std::string& name) const;
  // Its optimizer-state keys ("exp_avg", "exp_avg_sq", "step", "momentum_buffer"), sorted.
  std::vector<std::string> state_keys(const std::string& name) const;
  // The whole state tensor (the parameter's shape; "step" an i64 scalar), undefined when the
  // checkpoint has none for it.
  Tensor state(const std::string& name, const std::string& key) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// This rank's tensor-parallel block (shape `block_shape`, the Module's tensor) of a whole
// tensor laid out as `info` says; an uneven split's padding is zero. Unsplit: `whole` itself.
Tensor tp_block(const Tensor& whole, const models::ParameterInfo& info, const Shape& block_shape);

// load_checkpoint_parts over a reader (either format): every parameter of `parts` set to its
// tp block, the optimizer state of their parameters loaded, the step count restored, the loss
// scaler's state set. whole: every parameter of the checkpoint must be one of the parts'.
TrainingProgress load_checkpoint_from(const CheckpointReader& reader,
                                      const std::vector<models::Model*>& parts,
                                      Optimizer& optimizer, GradScaler* scaler, bool whole);

// A pipeline stage's rank resumed from a checkpoint of either format at any layout: each
// parameter's tp block and its optimizer state handed to StageStep::load_state (ZeRO's shards
// included), the step count and the loss scaler restored. `parts` are the step's parts.
TrainingProgress load_stage_checkpoint(const CheckpointReader& reader,
                                       const std::vector<models::Model*>& parts,
                                       StageStep& step);

// The checkpoint's model as one Hugging Face folder: config.json and the assets copied, the
// weights under the family's own names (models::export_parameters through the model's
// WeightMap) in out_dir/model.safetensors. Either format.
void merge_checkpoint(const std::filesystem::path& folder, const std::filesystem::path& out_dir);

}  // namespace libai::train
