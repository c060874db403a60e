// The file mechanics of both checkpoint formats (train/checkpoint/folder.h).
#include "train/checkpoint/folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/logging.h"
#include "train/checkpoint/sharded.h"

namespace libai::train {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

constexpr const char* kFormat = checkpoint_files::kTrainerFormat;
constexpr int kFormatVersion = 1;
// Files of the model's source folder that make a checkpoint folder usable on its own
// (generation, `libai-actor convert`); config.json is written from the model's own config.
constexpr const char* kAssetFiles[] = {"generation_config.json",
                                       "tokenizer.json",
                                       "tokenizer_config.json",
                                       "special_tokens_map.json",
                                       "vocab.txt",
                                       "vocab.json",
                                       "merges.txt",
                                       "spiece.model",
                                       "preprocessor_config.json"};
constexpr size_t kWriteChunk = size_t(4) << 20;

std::function<void(const std::string&)>& write_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

[[noreturn]] void throw_io(const std::string& what, const fs::path& path) {
  LIBAI_THROW(IoError, "checkpoint: cannot ", what, " ", path.string(), ": ", std::strerror(errno));
}

}  // namespace

namespace checkpoint_files {

void at_phase(const std::string& phase) {
  if (write_hook()) write_hook()(phase);
}

void write_file_synced(const fs::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_io("create", path);
  const std::string name = path.filename().string();
  size_t done = 0;
  while (done < bytes.size()) {
    const size_t n = std::min(kWriteChunk, bytes.size() - done);
    const ssize_t wrote = ::write(fd, bytes.data() + done, n);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      errno = saved;
      throw_io("write", path);
    }
    done += size_t(wrote);
    at_phase(name + ":" + std::to_string(done));
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    throw_io("fsync", path);
  }
  if (::close(fd) != 0) throw_io("close", path);
}

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io("open the folder", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw_io("fsync the folder", dir);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  LIBAI_CHECK_KIND(IoError, in.good(), "checkpoint: cannot read ", path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

Json read_json(const fs::path& path) {
  try {
    return Json::parse(read_file(path));
  } catch (const Json::exception& e) {
    LIBAI_THROW(CorruptInput, "checkpoint: ", path.string(), " is not valid JSON: ", e.what());
  }
}

}  // namespace checkpoint_files

namespace {

using namespace checkpoint_files;

// Moves `target` out of the way under a .trash-* name, then removes it: a half-removed folder
// never carries a checkpoint's name.
void remove_folder(const fs::path& target) {
  const fs::path trash = target.parent_path() / (".trash-" + target.filename().string() + "-" +
                                                 std::to_string(::getpid()));
  fs::rename(target, trash);
  fsync_directory(target.parent_path());
  fs::remove_all(trash);
}

// Renames `from` to `to`; an existing `to` is swapped out atomically and removed.
void rename_into_place(const fs::path& from, const fs::path& to) {
  if (!fs::exists(to)) {
    if (std::rename(from.c_str(), to.c_str()) != 0) throw_io("rename into place", to);
    return;
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(from);  // now the old folder
    return;
  }
  // A file system without RENAME_EXCHANGE: for a moment there is no folder of that name, never
  // a partial one.
  remove_folder(to);
  if (std::rename(from.c_str(), to.c_str()) != 0) throw_io("rename into place", to);
}

bool is_numbered(const std::string& name, int64_t* iteration = nullptr) {
  if (name.size() < 13 || name.rfind("model_", 0) != 0) return false;
  for (size_t i = 6; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  if (iteration) *iteration = std::stoll(name.substr(6));
  return true;
}

Json schedule_json(const LrScheduler* schedule) {
  if (!schedule) return nullptr;
  const LrSchedulerOptions& o = schedule->options();
  return {{"name", lr_schedule_name(o.kind)},
          {"max_iter", o.max_iter},
          {"warmup_iter", o.warmup_iter},
          {"warmup_factor", o.warmup_factor},
          {"warmup_method", o.warmup_method},
          {"alpha", o.alpha},
          {"eta_min", o.eta_min},
          {"step_size", o.step_size},
          {"gamma", o.gamma},
          {"milestones", o.milestones},
          {"power", o.power},
          {"end_learning_rate", o.end_learning_rate},
          {"cycle", o.cycle}};
}

fs::path assets_folder(const models::Model& model, const SaveOptions& options) {
  if (!options.assets_from.empty()) return options.assets_from;
  const fs::path config = model.config().path();
  if (fs::is_regular_file(config)) return config.parent_path();
  if (fs::is_directory(config)) return config;
  return {};
}

void prune(const fs::path& output_dir, const std::string& keep, int max_to_keep) {
  if (max_to_keep <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> numbered;
  for (const auto& entry : fs::directory_iterator(output_dir)) {
    int64_t iteration = 0;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && is_numbered(name, &iteration))
      numbered.emplace_back(iteration, entry.path());
  }
  std::sort(numbered.begin(), numbered.end());
  size_t excess = numbered.size() > size_t(max_to_keep) ? numbered.size() - size_t(max_to_keep) : 0;
  for (size_t i = 0; i < numbered.size() && excess > 0; ++i) {
    if (numbered[i].second.filename() == keep) continue;
    remove_folder(numbered[i].second);
    --excess;
    at_phase("pruned " + numbered[i].second.filename().string());
  }
}

// The iteration of a complete checkpoint folder, or nullopt.
std::optional<int64_t> complete_iteration(const fs::path& folder) {
  std::error_code ec;
  if (fs::is_regular_file(folder / "layout.json", ec) && !sharded_checkpoint_complete(folder))
    return std::nullopt;
  const bool sharded = fs::is_regular_file(folder / "layout.json", ec);
  for (const char* file : kRequiredFiles)
    if (!fs::is_regular_file(folder / file, ec) &&
        !(sharded && std::string(file).find(".safetensors") != std::string::npos))
      return std::nullopt;
  try {
    const Json trainer = read_json(folder / "trainer.json");
    if (!trainer.is_object() || trainer.value("format", "") != kFormat) return std::nullopt;
    if (!sharded) {
      checkpoint::SafetensorsFile::open((folder / "model.safetensors").string());
      checkpoint::SafetensorsFile::open((folder / "optimizer.safetensors").string());
    }
    return trainer.at("iteration").get<int64_t>();
  } catch (const Error&) {
    return std::nullopt;
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

// Top-level keys whose values differ, for the config mismatch message.
std::string config_differences(const Json& saved, const Json& model) {
  std::set<std::string> keys;
  for (auto it = saved.begin(); it != saved.end(); ++it) keys.insert(it.key());
  for (auto it = model.begin(); it != model.end(); ++it) keys.insert(it.key());
  std::string out;
  int shown = 0;
  for (const auto& key : keys) {
    const Json a = saved.contains(key) ? saved[key] : Json("<absent>");
    const Json b = model.contains(key) ? model[key] : Json("<absent>");
    if (a == b) continue;
    if (shown++ < 8) out += str_cat("\n  ", key, ": checkpoint ", a.dump(), ", model ", b.dump());
  }
  return out;
}

}  // namespace

namespace checkpoint_files {

void remove_stale(const fs::path& output_dir) {
  for (const auto& entry : fs::directory_iterator(output_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".tmp-", 0) == 0 || name.rfind(".trash-", 0) == 0 ||
        name == ".last_checkpoint.tmp")
      fs::remove_all(entry.path());
  }
}

Json trainer_json(const TrainingProgress& progress, const std::vector<ParamGroup>& groups,
                  int64_t optimizer_steps, const GradScaler* scaler, const SaveOptions& options) {
  Json group_list = Json::array();
  for (const auto& g : groups)
    group_list.push_back(
        {{"parameters", g.names.size()}, {"base_lr", g.base_lr}, {"weight_decay", g.weight_decay}});
  Json loss_scale = nullptr;
  if (scaler)
    loss_scale = {{"scale", scaler->scale()}, {"growth_tracker", scaler->growth_tracker()}};
  return {{"format", kFormat},
          {"format_version", kFormatVersion},
          {"libai_actor_version", LIBAI_VERSION},
          {"iteration", progress.iteration},
          {"consumed_samples", progress.consumed_samples},
          {"best_metric", progress.has_best ? Json(progress.best_metric) : Json(nullptr)},
          {"seed", progress.seed},
          {"optimizer_steps", optimizer_steps},
          {"param_groups", group_list},
          {"loss_scale", loss_scale},
          {"scheduler", schedule_json(options.schedule)}};
}

void check_name(const std::string& name) {
  LIBAI_CHECK(!name.empty() && name[0] != '.' && name.find('/') == std::string::npos &&
                  name != "last_checkpoint",
              "save_checkpoint: invalid checkpoint name \"", name, "\"");
}

void write_model_files(const fs::path& folder, const models::Model& model,
                       const SaveOptions& options) {
  write_file_synced(folder / "config.json", model.config().json().dump(2) + "\n");
  const fs::path assets = assets_folder(model, options);
  if (!assets.empty())
    for (const char* file : kAssetFiles)
      if (fs::is_regular_file(assets / file))
        write_file_synced(folder / file, read_file(assets / file));
}

void publish(const fs::path& temp, const fs::path& output_dir, const std::string& name,
             int max_to_keep) {
  rename_into_place(temp, output_dir / name);
  fsync_directory(output_dir);
  at_phase("renamed");

  const fs::path pointer_temp = output_dir / ".last_checkpoint.tmp";
  write_file_synced(pointer_temp, name + "\n");
  if (std::rename(pointer_temp.c_str(), (output_dir / "last_checkpoint").c_str()) != 0)
    throw_io("rename into place", output_dir / "last_checkpoint");
  fsync_directory(output_dir);
  at_phase("last_checkpoint");

  prune(output_dir, name, max_to_keep);
}

Json read_trainer(const fs::path& folder) {
  const fs::path trainer_path = folder / "trainer.json";
  LIBAI_CHECK_KIND(NotFound, fs::is_regular_file(trainer_path), "load_checkpoint: ",
                   folder.string(), " has no trainer.json (not a complete training checkpoint)");
  const Json trainer = read_json(trainer_path);
  LIBAI_CHECK_KIND(CorruptInput, trainer.is_object() && trainer.value("format", "") == kFormat,
                   "load_checkpoint: ", trainer_path.string(),
                   " is not a training checkpoint's (format \"", kFormat, "\" expected)");
  LIBAI_CHECK_KIND(Unsupported, trainer.value("format_version", 0) <= kFormatVersion,
                   "load_checkpoint: ", trainer_path.string(), " has format version ",
                   trainer.value("format_version", 0), "; this build reads up to ", kFormatVersion);
  return trainer;
}

TrainingProgress parse_progress(const Json& trainer, const fs::path& folder) {
  TrainingProgress progress;
  try {
    progress.iteration = trainer.at("iteration").get<int64_t>();
    progress.consumed_samples = trainer.at("consumed_samples").get<int64_t>();
    progress.seed = trainer.at("seed").get<uint64_t>();
    const Json& best = trainer.at("best_metric");
    progress.has_best = !best.is_null();
    if (progress.has_best) progress.best_metric = best.get<double>();
    const Json& loss_scale = trainer.at("loss_scale");
    if (!loss_scale.is_null()) {
      progress.loss_scale = loss_scale.at("scale").get<double>();
      progress.loss_scale_growth_tracker = loss_scale.at("growth_tracker").get<int64_t>();
    }
  } catch (const Json::exception& e) {
    LIBAI_THROW(CorruptInput, "load_checkpoint: ", (folder / "trainer.json").string(), ": ",
                e.what());
  }
  return progress;
}

int64_t optimizer_steps_of(const Json& trainer, const fs::path& folder) {
  try {
    return trainer.at("optimizer_steps").get<int64_t>();
  } catch (const Json::exception& e) {
    LIBAI_THROW(CorruptInput, "load_checkpoint: ", (folder / "trainer.json").string(), ": ",
                e.what());
  }
}

void check_config(const fs::path& folder, const models::Model& model) {
  const Json config = read_json(folder / "config.json");
  if (config != model.config().json())
    LIBAI_THROW(InvalidArgument, "load_checkpoint: ", (folder / "config.json").string(),
                " is not the model's config:", config_differences(config, model.config().json()));
}

void restore_scaler(const TrainingProgress& progress, const fs::path& folder, GradScaler* scaler) {
  LIBAI_CHECK(progress.loss_scale.has_value() == (scaler != nullptr),
              "load_checkpoint: ", folder.string(), progress.loss_scale ? " has" : " has no",
              " loss scaler state, the run ", scaler ? "has" : "has no",
              " loss scaler (train.amp / loss scaling must match to resume)");
  if (scaler) scaler->set_state(*progress.loss_scale, progress.loss_scale_growth_tracker);
}

}  // namespace checkpoint_files

void set_checkpoint_write_hook(std::function<void(const std::string& phase)> hook) {
  write_hook() = std::move(hook);
}

std::string checkpoint_name(int64_t iteration) {
  LIBAI_CHECK(iteration >= 0, "checkpoint_name: negative iteration ", iteration);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "model_%07lld", static_cast<long long>(iteration));
  return buffer;
}

std::optional<fs::path> last_checkpoint(const fs::path& output_dir) {
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return std::nullopt;
  std::string named;
  if (fs::is_regular_file(output_dir / "last_checkpoint", ec)) {
    try {
      named = read_file(output_dir / "last_checkpoint");
    } catch (const Error&) {
    }
    while (!named.empty() && std::isspace(static_cast<unsigned char>(named.back())))
      named.pop_back();
    if (named.find('/') != std::string::npos || named.rfind(".", 0) == 0) named.clear();
  }
  std::optional<fs::path> best;
  int64_t best_iteration = -1;
  bool best_is_named = false;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_directory()) continue;
    auto iteration = complete_iteration(entry.path());
    if (!iteration) continue;
    const bool is_named = name == named;
    if (*iteration > best_iteration ||
        (*iteration == best_iteration && is_named && !best_is_named)) {
      best = entry.path();
      best_iteration = *iteration;
      best_is_named = is_named;
    }
  }
  if (best && !named.empty() && !best_is_named)
    logger("train")->warn("{}: last_checkpoint names {}, resuming from the newer complete {}",
                          output_dir.string(), named, best->filename().string());
  return best;
}

}  // namespace libai::train
