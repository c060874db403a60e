// Internal: the file mechanics both checkpoint formats share (gathered.cc and sharded.cc in this
// folder): synced writes, the publishing steps of Note [Checkpoint atomicity], trainer.json and
// the checks a loader makes of a folder's metadata. folder.cc also holds the public names of
// gathered.h that both formats use (checkpoint_name, last_checkpoint, the write hook).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/checkpoint/gathered.h"

namespace libai::train::checkpoint_files {

using Json = nlohmann::json;

// trainer.json's "format" (both layouts: layout.json says which one the tensors are in).
inline constexpr const char* kTrainerFormat = "libai-actor-training-checkpoint";
// The files of a complete gathered checkpoint (a sharded one has layout.json and shards in
// place of the two .safetensors).
inline constexpr const char* kRequiredFiles[] = {"config.json", "model.safetensors",
                                                 "optimizer.safetensors", "trainer.json"};

// A crash point for set_checkpoint_write_hook.
void at_phase(const std::string& phase);
// Writes `bytes` to `path` in chunks (a crash point after each) and fsyncs it.
void write_file_synced(const std::filesystem::path& path, const std::string& bytes);
void fsync_directory(const std::filesystem::path& dir);
std::string read_file(const std::filesystem::path& path);
// CorruptInput naming the file when it is not JSON.
Json read_json(const std::filesystem::path& path);
// Checks a checkpoint name (not hidden, no '/', not "last_checkpoint").
void check_name(const std::string& name);
// Removes .tmp-*, .trash-* leftovers of earlier saves from output_dir.
void remove_stale(const std::filesystem::path& output_dir);
// config.json and the tokenizer / generation assets of `model` into `folder`, each synced.
void write_model_files(const std::filesystem::path& folder, const models::Model& model,
                       const SaveOptions& options);
Json trainer_json(const TrainingProgress& progress, const std::vector<ParamGroup>& groups,
                  int64_t optimizer_steps, const GradScaler* scaler, const SaveOptions& options);
// The end of a save: `temp` (complete, synced) renamed to output_dir/name, last_checkpoint
// rewritten, old numbered folders pruned (Note [Checkpoint atomicity]).
void publish(const std::filesystem::path& temp, const std::filesystem::path& output_dir,
             const std::string& name, int max_to_keep);

// trainer.json of `folder`, its format and version checked.
Json read_trainer(const std::filesystem::path& folder);
TrainingProgress parse_progress(const Json& trainer, const std::filesystem::path& folder);
int64_t optimizer_steps_of(const Json& trainer, const std::filesystem::path& folder);
// InvalidArgument naming the differing keys when folder/config.json is not the model's.
void check_config(const std::filesystem::path& folder, const models::Model& model);
// The loss scaler's state into `scaler`; InvalidArgument when exactly one side has one.
void restore_scaler(const TrainingProgress& progress, const std::filesystem::path& folder,
                    GradScaler* scaler);

}  // namespace libai::train::checkpoint_files
