// `libai-actor checkpoint merge FOLDER OUT_DIR`: one Hugging Face folder (the family's own
// tensor names, config.json and the tokenizer files) from a training checkpoint of either
// format: whole (model.safetensors) or sharded (layout.json + shards/, written by graph-mode
// training at any layout). FOLDER may also be a training output folder: its last complete
// checkpoint is merged. Prints one line: what was written and how long it took.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "bin/commands.h"
#include "train/checkpoint/sharded.h"

namespace libai::cli {
namespace {

struct MergeOptions {
  std::string folder;
  std::string out_dir;
};

int merge(MergeOptions options) {
  namespace fs = std::filesystem;
  if (fs::is_directory(options.folder) && !fs::exists(fs::path(options.folder) / "trainer.json") &&
      fs::exists(fs::path(options.folder) / "last_checkpoint")) {
    auto found = train::last_checkpoint(options.folder);
    LIBAI_CHECK_KIND(NotFound, found.has_value(), "checkpoint merge: ", options.folder,
                     " has last_checkpoint but no complete checkpoint folder");
    options.folder = found->string();
  }
  const auto start = std::chrono::steady_clock::now();
  train::merge_checkpoint(options.folder, options.out_dir);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("merged %s -> %s (hf layout), %.2f s\n", options.folder.c_str(),
              (fs::path(options.out_dir) / "model.safetensors").c_str(), seconds);
  return kExitOk;
}

}  // namespace

CommandAction setup_checkpoint(CLI::App& command) {
  command.require_subcommand(1);
  auto options = std::make_shared<MergeOptions>();
  CLI::App* merge_command = command.add_subcommand(
      "merge", "write one Hugging Face folder from a training checkpoint (whole or sharded)");
  merge_command
      ->add_option("FOLDER", options->folder,
                   "checkpoint folder (model_NNNNNNN, model_final), or a training output folder")
      ->required();
  merge_command->add_option("OUT_DIR", options->out_dir, "folder to write (created)")->required();
  return [options, merge_command] { return merge_command->parsed() ? merge(*options) : kExitUsage; };
}

}  // namespace libai::cli
