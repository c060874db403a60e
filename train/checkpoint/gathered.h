// Training checkpoints: the model, the optimizer state and the training progress in one folder,
// written so that a crash at any byte never leaves a folder that looks complete.
// docs/CHECKPOINTS.md, "Training checkpoints".
//
//   TrainingProgress progress{.iteration = step.steps_done(), .consumed_samples = samples,
//                             .seed = options.seed};
//   save_checkpoint(out, checkpoint_name(progress.iteration), *model, *optimizer,
//                   step.scaler(), progress, /*max_to_keep=*/3, {.schedule = &schedule});
//   ...
//   if (auto folder = last_checkpoint(out)) {                     // --resume
//     progress = load_checkpoint(*folder, *model, *optimizer, step.scaler());
//     step.set_steps_done(progress.iteration);
//   }
//
// A folder output_dir/model_0000100/ holds
//   config.json            the model's config (so models::load_model reads the folder)
//   model.safetensors      the parameters under this project's names, metadata format=libai
//   optimizer.safetensors  Optimizer::state_tensors()
//   trainer.json           progress, the scheduler's options, the loss scaler, versions
//   + tokenizer / generation_config files copied from the model's source folder
// and output_dir/last_checkpoint names the newest one ("model_0000100\n", as LiBai writes it).
//
// Note [Checkpoint atomicity]
// Everything is written into output_dir/.tmp-<name>-<pid>/, each file fsynced, then the
// folder is renamed into place (an existing model_best is swapped atomically with
// renameat2(RENAME_EXCHANGE)) and output_dir fsynced; only then is last_checkpoint rewritten
// (temp file + rename + fsync). A crash before the rename leaves a .tmp-* folder that nothing
// reads (the next save removes it); a crash after it leaves a complete folder, which
// last_checkpoint() finds even if the last_checkpoint file still names the previous one.
// Old folders are pruned by renaming them to .trash-* before removing them, so a half-removed
// folder never carries a checkpoint's name.
//
// Note [Checkpoints under tensor parallelism]
// Every rank of the tensor-parallel group takes part in save_checkpoint: each split parameter
// (and its optimizer state) is all-gathered over the group and the padding of an uneven split
// dropped, so the files hold whole tensors, the same as a one-device run writes; tp rank 0 of
// dp rank 0 writes them. load_checkpoint reads whole tensors and keeps this rank's slice
// (models::load_parameters' slicing), so a checkpoint loads at any tensor-parallel size that
// the model itself can be built with.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"

#include "models/model.h"
#include "train/grad_scaler.h"
#include "train/lr_scheduler.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace libai::train {

// Where a run stands. The dropout RNG is a function of (seed, step, sample index)
// (models/training_mode.h), so seed + iteration are all of the RNG state; consumed_samples
// is the data position.
struct TrainingProgress {
  int64_t iteration = 0;  // optimizer steps done (the next step's index)
  int64_t consumed_samples = 0;
  double best_metric = 0;
  bool has_best = false;
  uint64_t seed = 1234;
  // The loss scaler's state when the run has one (filled by load_checkpoint; save_checkpoint
  // reads the scaler it is given instead).
  std::optional<double> loss_scale;
  int64_t loss_scale_growth_tracker = 0;
};

struct SaveOptions {
  const LrScheduler* schedule = nullptr;  // its options are recorded in trainer.json
  // tp: split parameters are gathered over it (every rank of the group calls save); dp: only
  // its rank 0 writes. Every rank returns once the checkpoint is complete.
  ParallelGroups groups;
  // Tokenizer and generation_config files are copied from here (empty: the folder the model's
  // config.json was read from, when there is one).
  std::filesystem::path assets_from;
};

// "model_0000100": LiBai's name for the checkpoint after `iteration` steps (7 digits).
std::string checkpoint_name(int64_t iteration);

// Writes output_dir/name (Note [Checkpoint atomicity]), rewrites output_dir/last_checkpoint to
// name it, and keeps at most max_to_keep model_NNNNNNN folders (the oldest go; model_best,
// model_final and other names are never removed; max_to_keep <= 0 keeps all). Returns the
// folder.
std::filesystem::path save_checkpoint(const std::filesystem::path& output_dir,
                                      const std::string& name, models::Model& model,
                                      Optimizer& optimizer, const GradScaler* scaler,
                                      const TrainingProgress& progress, int max_to_keep,
                                      const SaveOptions& options = {});

// Reads a checkpoint folder into `model` (by this project's parameter names, this rank's
// slice under tensor parallelism), `optimizer` (its state) and `scaler` (when the run has
// one: the checkpoint must have a loss scale exactly when `scaler` is given). Every mismatch
// is one error naming the file and what differs: a missing file, a config.json different from
// the model's, a missing or extra tensor, a shape, a corrupt file. Never executes code.
TrainingProgress load_checkpoint(const std::filesystem::path& folder, models::Model& model,
                                 Optimizer& optimizer, GradScaler* scaler);

// Note [Checkpoints of pipeline parts]
// A model trained as parts (pipeline stages, Note [Model parts]) is saved as the whole model:
// every rank gathers its parts' tensors over its tensor-parallel group
// (gather_checkpoint_tensors, a collective of that group), the writer merges every stage's
// (a weight tied across stages once) and write_checkpoint writes them in the format above, so
// the folder is what a one-device run writes and loads at any layout. load_checkpoint_parts
// reads a rank's parts and the optimizer state of their parameters from such a folder.
struct CheckpointTensors {
  checkpoint::NamedTensors weights;  // whole tensors under the whole model's names
  checkpoint::NamedTensors state;    // Optimizer::state_tensors, whole
};
CheckpointTensors gather_checkpoint_tensors(const std::vector<models::Model*>& parts,
                                            Optimizer& optimizer, comm::Communicator* tp);
// Writes output_dir/name from whole tensors (on one rank). `model` gives config.json and the
// assets; `optimizer` the groups and step count recorded in trainer.json.
std::filesystem::path write_checkpoint(const std::filesystem::path& output_dir,
                                       const std::string& name, const models::Model& model,
                                       CheckpointTensors tensors, Optimizer& optimizer,
                                       const GradScaler* scaler, const TrainingProgress& progress,
                                       int max_to_keep, const SaveOptions& options = {});
// load_checkpoint for the parts one rank holds and the optimizer over their parameters;
// whole: the parts are the whole model (a tensor of the file that none holds is an error).
TrainingProgress load_checkpoint_parts(const std::filesystem::path& folder,
                                       const std::vector<models::Model*>& parts,
                                       Optimizer& optimizer, GradScaler* scaler, bool whole);

// The checkpoint to resume from: the folder output_dir/last_checkpoint names, or a newer
// complete checkpoint folder (a crash between the folder's rename and the last_checkpoint
// rewrite); nullopt when there is none. A folder counts when its files are all there and
// trainer.json and the safetensors headers parse; .tmp-* folders are never considered.
std::optional<std::filesystem::path> last_checkpoint(const std::filesystem::path& output_dir);

// Test hook: called with a named phase ("config.json", "model.safetensors:<bytes written>",
// "renamed", "last_checkpoint", "pruned", ...) at every point a crash could happen while a
// checkpoint is written. Tests raise SIGKILL from it in a forked child. Null: none.
void set_checkpoint_write_hook(std::function<void(const std::string& phase)> hook);

}  // namespace libai::train
