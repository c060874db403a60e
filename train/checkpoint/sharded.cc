#include "train/checkpoint/sharded.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <tuple>
#include <set>

#include <nlohmann/json.hpp>

#include "models/convert.h"
#include "models/hf_config.h"
#include "ops/view.h"
#include "runtime/autograd.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/safetensors_format.h"
#include "runtime/logging.h"
#include "train/checkpoint/folder.h"
#include "train/checkpoint/sharded_layout.h"

namespace libai::train {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using namespace checkpoint_files;
using namespace sharded_layout;

namespace {

// Every rank's count of pieces written (or -1: it failed), over `world`.
std::vector<double> agree(comm::Communicator* world, double mine) {
  if (!world) return {mine};
  Tensor t = Tensor::zeros({world->size()}, DType::f64);
  static_cast<double*>(t.data_ptr())[world->rank()] = mine;
  world->all_reduce(t);
  return t.to_vector<double>();
}

void check_agreed(const std::vector<double>& counts, const std::exception_ptr& own,
                  const char* phase) {
  if (own) std::rethrow_exception(own);
  for (size_t r = 0; r < counts.size(); ++r)
    LIBAI_CHECK_KIND(IoError, counts[r] >= 0, "save_sharded_checkpoint: world rank ", r,
                     " failed while ", phase, " (its log names the error)");
}

}  // namespace

// ---- saving ---------------------------------------------------------------------------------

fs::path save_sharded_checkpoint(const fs::path& output_dir, const std::string& name,
                                 const std::vector<OwnedSlice>& slices, comm::Communicator* world,
                                 const ShardedLayout& layout, const models::Model& model,
                                 Optimizer& optimizer, int64_t optimizer_steps,
                                 const GradScaler* scaler, const TrainingProgress& progress,
                                 int max_to_keep, const SaveOptions& options,
                                 bool whole_weights) {
  check_name(name);
  autograd::NoGradGuard no_grad;
  const int rank = world ? world->rank() : 0;
  const int size = world ? world->size() : 1;
  // One temp folder for every rank (a pid would differ between processes).
  const fs::path temp = output_dir / (".tmp-" + name + "-sharded");
  std::exception_ptr failure;
  auto attempt = [&](const std::function<void()>& body) {
    try {
      body();
    } catch (const Error& e) {
      failure = std::current_exception();
      logger("train")->error("checkpoint {}: {}", name, e.what());
    }
  };

  // 1. World rank 0 clears leftovers and makes the temp folder before anyone writes there.
  if (rank == 0)
    attempt([&] {
      fs::create_directories(output_dir);
      remove_stale(output_dir);
      at_phase("start");
      fs::create_directories(temp / "shards");
    });
  check_agreed(agree(world, failure ? -1 : 0), failure, "preparing the checkpoint folder");

  // 2. Every rank that owns something writes and syncs its shard.
  attempt([&] {
    if (!slices.empty()) write_file_synced(temp / shard_file(rank), serialize_shard(slices));
  });
  const std::vector<double> counts = agree(world, failure ? -1 : double(slices.size()));
  check_agreed(counts, failure, "writing its shard");

  // 3. World rank 0 indexes the shards, writes the metadata and publishes the folder.
  if (rank == 0)
    attempt([&] {
      fsync_directory(temp / "shards");
      std::vector<int> writers;
      for (int r = 0; r < size; ++r)
        if (counts[size_t(r)] > 0) writers.push_back(r);
      write_file_synced(temp / "layout.json",
                        build_layout(temp, writers, layout, size).dump(1) + "\n");
      // What a reader will check, before the folder gets its name.
      const ParsedLayout parsed = parse_layout(temp);
      if (whole_weights) {
        checkpoint::NamedTensors weights;
        for (const auto& [param, entry] : parsed.parameters)
          weights.emplace_back(param, assemble(entry.values, parsed.files));
        write_file_synced(temp / "model.safetensors",
                          checkpoint::serialize_safetensors(
                              weights, {{"format", "libai"},
                                        {"model_type", model.config().model_type()}}));
      }
      write_model_files(temp, model, options);
      write_file_synced(temp / "trainer.json",
                        trainer_json(progress, optimizer.groups(), optimizer_steps, scaler, options)
                                .dump(2) +
                            "\n");
      fsync_directory(temp);
      at_phase("files_synced");
      publish(temp, output_dir, name, max_to_keep);
      logger("train")->info("saved checkpoint {} (iteration {}, sharded over {} files)",
                            (output_dir / name).string(), progress.iteration, writers.size());
    });
  check_agreed(agree(world, failure ? -1 : 0), failure, "publishing the checkpoint");
  return output_dir / name;
}

// ---- reading --------------------------------------------------------------------------------

bool is_numbered_checkpoint(const std::string& name) {
  if (name.size() < 13 || name.rfind("model_", 0) != 0) return false;
  return std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_sharded_checkpoint(const fs::path& folder) {
  std::error_code ec;
  return fs::is_regular_file(folder / "layout.json", ec);
}

bool sharded_checkpoint_complete(const fs::path& folder) {
  try {
    parse_layout(folder);
    read_trainer(folder);
    return fs::is_regular_file(folder / "config.json");
  } catch (const Error&) {
    return false;
  } catch (const std::exception&) {
    return false;
  }
}

struct CheckpointReader::Impl {
  fs::path folder;
  bool sharded = false;
  TrainingProgress progress;
  int64_t optimizer_steps = 0;
  ShardedLayout layout;
  // Sharded.
  ParsedLayout parsed;
  // Whole: the two files, and each parameter's state keys in optimizer.safetensors.
  std::optional<checkpoint::SafetensorsFile> model, optimizer;
  std::map<std::string, std::map<std::string, std::string>> state_names;
};

CheckpointReader CheckpointReader::open(const fs::path& folder) {
  LIBAI_CHECK_KIND(NotFound, fs::is_directory(folder), "load_checkpoint: ", folder.string(),
                   " is not a folder");
  auto impl = std::make_shared<Impl>();
  impl->folder = folder;
  const Json trainer = read_trainer(folder);
  impl->progress = parse_progress(trainer, folder);
  impl->optimizer_steps = optimizer_steps_of(trainer, folder);
  LIBAI_CHECK_KIND(NotFound, fs::is_regular_file(folder / "config.json"), "load_checkpoint: ",
                   folder.string(), " has no config.json");
  impl->sharded = is_sharded_checkpoint(folder);
  if (impl->sharded) {
    impl->parsed = parse_layout(folder);
    impl->layout = impl->parsed.layout;
    // Every shard is read whole (a rank assembles whole tensors): ask the kernel for all of
    // them now, so the disk streams them while the first tensors are assembled instead of
    // faulting the mappings in page by page.
    for (const auto& [name, file] : impl->parsed.files) {
      const int fd = ::open((folder / name).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // opened a moment ago; a reader error will name it
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
      ::close(fd);
    }
  } else {
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      LIBAI_CHECK_KIND(NotFound, fs::is_regular_file(folder / file), "load_checkpoint: ",
                       folder.string(), " has neither layout.json nor ", file,
                       " (not a complete training checkpoint)");
    impl->model = checkpoint::SafetensorsFile::open((folder / "model.safetensors").string());
    impl->optimizer = checkpoint::SafetensorsFile::open((folder / "optimizer.safetensors").string());
    for (const auto& key : impl->optimizer->names()) {
      const size_t dot = key.rfind('.');
      if (dot == std::string::npos) continue;  // the optimizer's own "step"
      const std::string param = key.substr(0, dot);
      LIBAI_CHECK_KIND(CorruptInput, impl->model->contains(param), impl->optimizer->path(),
                       ": ", key, " is the state of ", param,
                       ", which model.safetensors does not have");
      const Shape& shape = impl->optimizer->info(key).shape;
      const std::string field = key.substr(dot + 1);
      LIBAI_CHECK_KIND(CorruptInput,
                       shape.empty() || shape == impl->model->info(param).shape,
                       impl->optimizer->path(), ": ", key, " has shape ", shape_str(shape),
                       ", its parameter ", shape_str(impl->model->info(param).shape));
      impl->state_names[param][field] = key;
    }
  }
  CheckpointReader reader;
  reader.impl_ = std::move(impl);
  return reader;
}

const fs::path& CheckpointReader::folder() const { return impl_->folder; }
bool CheckpointReader::sharded() const { return impl_->sharded; }
const TrainingProgress& CheckpointReader::progress() const { return impl_->progress; }
int64_t CheckpointReader::optimizer_steps() const { return impl_->optimizer_steps; }
const ShardedLayout& CheckpointReader::saved_layout() const { return impl_->layout; }

std::vector<std::string> CheckpointReader::parameter_names() const {
  std::vector<std::string> out;
  if (impl_->sharded) {
    for (const auto& [name, entry] : impl_->parsed.parameters) out.push_back(name);
  } else {
    out = impl_->model->names();
    std::sort(out.begin(), out.end());
  }
  return out;
}

bool CheckpointReader::has_parameter(const std::string& name) const {
  return impl_->sharded ? impl_->parsed.parameters.count(name) > 0
                        : impl_->model->contains(name);
}

Shape CheckpointReader::parameter_shape(const std::string& name) const {
  LIBAI_CHECK_KIND(NotFound, has_parameter(name), "checkpoint ", impl_->folder.string(),
                   " has no parameter ", name);
  return impl_->sharded ? impl_->parsed.parameters.at(name).values.shape
                        : impl_->model->info(name).shape;
}

Tensor CheckpointReader::parameter(const std::string& name) const {
  LIBAI_CHECK_KIND(NotFound, has_parameter(name), "checkpoint ", impl_->folder.string(),
                   " has no parameter ", name);
  if (!impl_->sharded) return impl_->model->tensor(name);
  return assemble(impl_->parsed.parameters.at(name).values, impl_->parsed.files);
}

std::vector<std::string> CheckpointReader::state_keys(const std::string& name) const {
  std::vector<std::string> out;
  if (impl_->sharded) {
    auto it = impl_->parsed.parameters.find(name);
    if (it != impl_->parsed.parameters.end())
      for (const auto& [key, e] : it->second.state) out.push_back(key);
  } else {
    auto it = impl_->state_names.find(name);
    if (it != impl_->state_names.end())
      for (const auto& [key, file_key] : it->second) out.push_back(key);
  }
  return out;
}

Tensor CheckpointReader::state(const std::string& name, const std::string& key) const {
  if (impl_->sharded) {
    auto it = impl_->parsed.parameters.find(name);
    if (it == impl_->parsed.parameters.end()) return {};
    auto s = it->second.state.find(key);
    return s == it->second.state.end() ? Tensor() : assemble(s->second, impl_->parsed.files);
  }
  auto it = impl_->state_names.find(name);
  if (it == impl_->state_names.end()) return {};
  auto s = it->second.find(key);
  return s == it->second.end() ? Tensor() : impl_->optimizer->tensor(s->second);
}

Tensor tp_block(const Tensor& whole, const models::ParameterInfo& info, const Shape& block_shape) {
  return models::tp_block_of(whole, info, info.tp_rank, block_shape);
}

TrainingProgress load_checkpoint_from(const CheckpointReader& reader,
                                      const std::vector<models::Model*>& parts,
                                      Optimizer& optimizer, GradScaler* scaler, bool whole) {
  LIBAI_CHECK(!parts.empty(), "load_checkpoint: no model part to load");
  autograd::NoGradGuard no_grad;
  const fs::path& folder = reader.folder();
  check_config(folder, *parts[0]);
  const std::string source = str_cat(folder.string(), reader.sharded() ? " (sharded)" : "");

  std::map<std::string, models::ParameterInfo> infos;
  std::vector<std::string> problems;
  for (models::Model* part : parts)
    for (auto& info : part->parameter_infos()) {
      infos.emplace(info.name, info);
      if (!reader.has_parameter(info.name)) {
        problems.push_back(str_cat("missing ", info.name, " ", shape_str(info.logical_shape)));
        continue;
      }
      const Shape saved = reader.parameter_shape(info.name);
      if (saved != info.logical_shape) {
        problems.push_back(str_cat("shape mismatch for ", info.name, ": expected ",
                                   shape_str(info.logical_shape), ", checkpoint has ",
                                   shape_str(saved)));
        continue;
      }
      info.tensor->copy_from(tp_block(reader.parameter(info.name), info, info.tensor->shape()));
    }
  if (whole)
    for (const auto& name : reader.parameter_names())
      if (!infos.count(name)) problems.push_back(str_cat(name, " is not a parameter of the model"));
  if (!problems.empty()) {
    std::string message = str_cat("load_checkpoint: ", source, ": ", problems.size(),
                                  " problem", problems.size() > 1 ? "s" : "", ":");
    for (size_t i = 0; i < problems.size() && i < 16; ++i) message += "\n  " + problems[i];
    LIBAI_THROW(CorruptInput, message);
  }

  // The optimizer state of the parts' parameters, cut like them.
  std::map<std::string, Tensor> state;
  state.emplace("step", Tensor::scalar(double(reader.optimizer_steps()), DType::i64));
  for (const auto& [name, info] : infos)
    for (const auto& key : reader.state_keys(name)) {
      Tensor t = reader.state(name, key);
      if (t.dim() > 0) t = tp_block(t, info, info.tensor->shape());
      state.emplace(name + "." + key, t);
    }
  try {
    optimizer.load_state_tensors(state);
  } catch (const Error& e) {
    detail::throw_error(e.kind(), str_cat("load_checkpoint: ", source, ": ", e.what()));
  }
  restore_scaler(reader.progress(), folder, scaler);
  return reader.progress();
}

TrainingProgress load_stage_checkpoint(const CheckpointReader& reader,
                                       const std::vector<models::Model*>& parts,
                                       StageStep& step) {
  LIBAI_CHECK(!parts.empty(), "load_checkpoint: no model part to load");
  const fs::path& folder = reader.folder();
  check_config(folder, *parts[0]);
  std::map<std::string, models::ParameterInfo> infos;
  for (models::Model* part : parts)
    for (auto& info : part->parameter_infos()) infos.emplace(info.name, info);
  auto info_of = [&](const std::string& name) -> const models::ParameterInfo* {
    auto it = infos.find(name);
    return it == infos.end() ? nullptr : &it->second;
  };
  auto block = [&](const std::string& name) -> Tensor {
    const models::ParameterInfo* info = info_of(name);
    if (!info || !reader.has_parameter(name)) return {};
    const Shape saved = reader.parameter_shape(name);
    LIBAI_CHECK_KIND(CorruptInput, saved == info->logical_shape, "load_checkpoint: ",
                     folder.string(), ": ", name, " has shape ", shape_str(saved),
                     ", the model's is ", shape_str(info->logical_shape));
    return tp_block(reader.parameter(name), *info, info->tensor->shape());
  };
  auto state = [&](const std::string& name, const std::string& key) -> Tensor {
    const models::ParameterInfo* info = info_of(name);
    Tensor t = info ? reader.state(name, key) : Tensor();
    if (!t.defined() || t.dim() == 0) return t;
    return tp_block(t, *info, info->tensor->shape());
  };
  try {
    step.load_state(block, state, reader.optimizer_steps());
  } catch (const Error& e) {
    detail::throw_error(e.kind(), str_cat("load_checkpoint: ", folder.string(), ": ", e.what()));
  }
  restore_scaler(reader.progress(), folder, step.scaler());
  step.set_steps_done(reader.progress().iteration);
  return reader.progress();
}

void merge_checkpoint(const fs::path& folder, const fs::path& out_dir) {
  const CheckpointReader reader = CheckpointReader::open(folder);
  LIBAI_CHECK(fs::weakly_canonical(folder) != fs::weakly_canonical(out_dir),
              "checkpoint merge: the destination ", out_dir.string(), " is the checkpoint folder");
  auto model = models::create_model(models::HfConfig::load(folder), {});
  {
    autograd::NoGradGuard no_grad;
    std::vector<std::string> problems;
    std::set<std::string> held;
    for (auto& info : model->parameter_infos()) {
      held.insert(info.name);
      if (!reader.has_parameter(info.name) ||
          reader.parameter_shape(info.name) != info.logical_shape) {
        problems.push_back(info.name);
        continue;
      }
      info.tensor->copy_from(reader.parameter(info.name));
    }
    for (const auto& name : reader.parameter_names())
      if (!held.count(name)) problems.push_back(name + " (not a parameter of the model)");
    if (!problems.empty()) {
      std::string list;
      for (size_t i = 0; i < problems.size() && i < 8; ++i) list += str_cat(i ? ", " : "", problems[i]);
      LIBAI_THROW(CorruptInput, "checkpoint merge: ", folder.string(),
                  " does not hold its config.json's model: missing, misshapen or extra ",
                  problems.size(), " tensor(s): ", list, problems.size() > 8 ? ", ..." : "");
    }
  }
  fs::create_directories(out_dir);
  for (const char* file : {"config.json", "generation_config.json", "tokenizer.json",
                           "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                           "vocab.json", "merges.txt", "spiece.model", "preprocessor_config.json"})
    if (fs::is_regular_file(folder / file))
      fs::copy_file(folder / file, out_dir / file, fs::copy_options::overwrite_existing);
  for (const char* stale : {"model.safetensors.index.json", "pytorch_model.bin"})
    if (fs::exists(out_dir / stale)) fs::remove(out_dir / stale);
  models::save_model_weights(*model, out_dir, models::CheckpointLayout::hf);
}

}  // namespace libai::train
