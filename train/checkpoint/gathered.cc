// The gathered checkpoint format (train/checkpoint/gathered.h).
#include "train/checkpoint/gathered.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/convert.h"
#include "ops/view.h"
#include "runtime/autograd.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/logging.h"
#include "train/checkpoint/folder.h"
#include "train/checkpoint/sharded.h"

namespace libai::train {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

using namespace checkpoint_files;

// The whole parameter (or a tensor of its shape) from this rank's shard: all-gathered over
// the tensor-parallel group along the split dim, the padding of an uneven split dropped.
Tensor gather_whole(const Tensor& shard, const models::ParameterInfo& info,
                    comm::Communicator* tp) {
  Tensor local = shard.detach();
  if (info.split_dim < 0 || info.tp_size == 1) return local;
  LIBAI_CHECK(tp && tp->size() == info.tp_size, "save_checkpoint: parameter ", info.name,
              " is split over ", info.tp_size,
              " ranks; pass the tensor-parallel group (SaveOptions::groups.tp)");
  const int d = info.split_dim;
  Tensor moved = ops::contiguous(d == 0 ? local : ops::transpose(local, 0, d));  // split dim first
  Shape gathered_shape = moved.shape();
  gathered_shape[0] *= info.tp_size;
  Tensor gathered = Tensor::empty(gathered_shape, moved.dtype(), moved.device());
  tp->all_gather(moved, gathered);
  if (info.partly_replicated())  // the blocks' rows of the whole, each once
    return models::whole_of_blocks(ops::chunk(gathered, info.tp_size, 0), info);
  Tensor whole = d == 0 ? gathered : ops::transpose(gathered, 0, d);
  return ops::contiguous(ops::narrow(whole, d, 0, info.logical_shape[size_t(d)]));
}

// "<parameter>.<field>" of Optimizer::state_tensors: the parameter's layout when the field has
// the parameter's shape (exp_avg, exp_avg_sq, momentum_buffer; not the per-parameter "step").
const models::ParameterInfo* shaped_like_parameter(
    const std::string& key, const std::map<std::string, models::ParameterInfo>& infos) {
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos || key.substr(dot + 1) == "step") return nullptr;
  auto it = infos.find(key.substr(0, dot));
  return it == infos.end() ? nullptr : &it->second;
}

}  // namespace

using namespace checkpoint_files;

CheckpointTensors gather_checkpoint_tensors(const std::vector<models::Model*>& parts,
                                            Optimizer& optimizer, comm::Communicator* tp) {
  autograd::NoGradGuard no_grad;
  CheckpointTensors out;
  // Note [Checkpoints under tensor parallelism]: every tp rank gathers, in the same order.
  std::map<std::string, models::ParameterInfo> infos;
  for (models::Model* part : parts)
    for (auto& info : part->parameter_infos()) {
      if (!infos.emplace(info.name, info).second) continue;  // a tied copy held twice
      out.weights.emplace_back(info.name, gather_whole(*info.tensor, info, tp));
    }
  for (auto& [key, tensor] : optimizer.state_tensors()) {
    const models::ParameterInfo* info = shaped_like_parameter(key, infos);
    out.state.emplace_back(key, info ? gather_whole(tensor, *info, tp) : tensor.detach());
  }
  return out;
}

fs::path write_checkpoint(const fs::path& output_dir, const std::string& name,
                          const models::Model& model, CheckpointTensors tensors,
                          Optimizer& optimizer, const GradScaler* scaler,
                          const TrainingProgress& progress, int max_to_keep,
                          const SaveOptions& options) {
  check_name(name);
  fs::create_directories(output_dir);
  remove_stale(output_dir);
  at_phase("start");
  const fs::path temp = output_dir / (".tmp-" + name + "-" + std::to_string(::getpid()));
  fs::create_directories(temp);
  write_model_files(temp, model, options);
  write_file_synced(
      temp / "model.safetensors",
      checkpoint::serialize_safetensors(
          tensors.weights, {{"format", "libai"}, {"model_type", model.config().model_type()}}));
  tensors.weights.clear();
  write_file_synced(temp / "optimizer.safetensors",
                    checkpoint::serialize_safetensors(tensors.state, {{"format", "libai-optimizer"}}));
  // Last: a folder with trainer.json has everything else (the rename makes that moot, but
  // a copied-by-hand folder is then also checked).
  write_file_synced(temp / "trainer.json",
                    trainer_json(progress, optimizer.groups(), optimizer.steps_taken(), scaler,
                                 options)
                            .dump(2) +
                        "\n");
  fsync_directory(temp);
  at_phase("files_synced");
  publish(temp, output_dir, name, max_to_keep);
  const fs::path target = output_dir / name;
  logger("train")->info("saved checkpoint {} (iteration {})", target.string(), progress.iteration);
  return target;
}

fs::path save_checkpoint(const fs::path& output_dir, const std::string& name, models::Model& model,
                         Optimizer& optimizer, const GradScaler* scaler,
                         const TrainingProgress& progress, int max_to_keep,
                         const SaveOptions& options) {
  check_name(name);
  comm::Communicator* tp = options.groups.tp.get();
  comm::Communicator* dp = options.groups.dp.get();
  const bool writer = (!tp || tp->rank() == 0) && (!dp || dp->rank() == 0);
  CheckpointTensors tensors = gather_checkpoint_tensors({&model}, optimizer, tp);
  if (writer)
    write_checkpoint(output_dir, name, model, std::move(tensors), optimizer, scaler, progress,
                     max_to_keep, options);
  // Every rank returns once the checkpoint is complete.
  if (tp) tp->barrier();
  if (dp) dp->barrier();
  return output_dir / name;
}

TrainingProgress load_checkpoint(const fs::path& folder, models::Model& model, Optimizer& optimizer,
                                 GradScaler* scaler) {
  return load_checkpoint_parts(folder, {&model}, optimizer, scaler, /*whole=*/true);
}

TrainingProgress load_checkpoint_parts(const fs::path& folder,
                                       const std::vector<models::Model*>& parts,
                                       Optimizer& optimizer, GradScaler* scaler, bool whole) {
  LIBAI_CHECK(!parts.empty(), "load_checkpoint: no model part to load");
  models::Model& model = *parts[0];
  LIBAI_CHECK_KIND(NotFound, fs::is_directory(folder), "load_checkpoint: ", folder.string(),
                   " is not a folder");
  if (is_sharded_checkpoint(folder))
    return load_checkpoint_from(CheckpointReader::open(folder), parts, optimizer, scaler, whole);
  for (const char* file : kRequiredFiles)
    LIBAI_CHECK_KIND(NotFound, fs::is_regular_file(folder / file),
                     "load_checkpoint: ", folder.string(), " has no ", file,
                     " (not a complete training checkpoint: written by save_checkpoint?)");
  const Json trainer = read_trainer(folder);
  check_config(folder, model);

  // The model: exactly the model's parameters, this rank's slices.
  const fs::path model_path = folder / "model.safetensors";
  auto source = models::WeightSource::open(model_path, models::WeightFormat::safetensors);
  LIBAI_CHECK_KIND(CorruptInput, models::is_libai_layout(source),
                   "load_checkpoint: ", model_path.string(),
                   " is not in this project's layout (metadata format=libai)");
  std::map<std::string, models::ParameterInfo> infos;
  for (models::Model* part : parts)
    for (auto& info : part->parameter_infos()) infos.emplace(info.name, info);
  std::vector<std::string> extra;
  for (const auto& name : source.names())
    if (!infos.count(name)) extra.push_back(name);
  if (whole && !extra.empty()) {
    std::string list;
    for (size_t i = 0; i < extra.size() && i < 8; ++i) list += str_cat(i ? ", " : "", extra[i]);
    LIBAI_THROW(CorruptInput, "load_checkpoint: ", model_path.string(), " has ", extra.size(),
                " tensor(s) that are not parameters of the model: ", list,
                extra.size() > 8 ? ", ..." : "");
  }
  try {
    for (models::Model* part : parts) {
      models::WeightMap map = models::identity_map(*part);
      if (!whole) map.ignore("");  // the other parts' tensors (Note [Model parts])
      models::load_parameters(*part, source, map);  // missing, shapes
    }
  } catch (const Error& e) {
    detail::throw_error(e.kind(), e.what());  // as its own type (load_parameters throws Error)
  }

  // The optimizer state, sliced like the parameters.
  const fs::path optimizer_path = folder / "optimizer.safetensors";
  const auto file = checkpoint::SafetensorsFile::open(optimizer_path.string());
  std::map<std::string, Tensor> state;
  for (const auto& key : file.names()) {
    // A part keeps the state of its own parameters (and the optimizer's step count).
    const size_t dot = key.rfind('.');
    if (!whole && dot != std::string::npos && !infos.count(key.substr(0, dot))) continue;
    Tensor tensor = file.tensor(key);
    const models::ParameterInfo* info = shaped_like_parameter(key, infos);
    if (info) {
      LIBAI_CHECK_KIND(CorruptInput, tensor.shape() == info->logical_shape,
                       "load_checkpoint: ", optimizer_path.string(), ": ", key, " has shape ",
                       shape_str(tensor.shape()), ", its parameter ", info->name, " is ",
                       shape_str(info->logical_shape));
      tensor = tp_block(tensor, *info, info->tensor->shape());
    }
    state.emplace(key, tensor);
  }
  try {
    optimizer.load_state_tensors(state);
  } catch (const Error& e) {
    detail::throw_error(e.kind(),
                        str_cat("load_checkpoint: ", optimizer_path.string(), ": ", e.what()));
  }

  const TrainingProgress progress = parse_progress(trainer, folder);
  restore_scaler(progress, folder, scaler);
  return progress;
}

}  // namespace libai::train
