// `libai-actor convert --from DIR --to DIR [--format libai|hf] [--quantize KIND]`: rewrites a checkpoint in this
// project's layout (libai: fused q/k/v, this project's parameter names) or back in the model
// family's Hugging Face layout (models/convert.h), with config.json and the tokenizer files.
// --from may also be a training run's output folder: its last complete checkpoint is read
// (train/checkpoint/gathered.h), so `convert --from OUT --to HF --format hf` exports a trained model.
// Prints one line: what was written, how many tensors and bytes, and how long it took.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "bin/commands.h"
#include "bin/model_args.h"
#include "models/convert.h"
#include "ops/packed_linear.h"
#include "runtime/checkpoint/safetensors.h"
#include "train/checkpoint/gathered.h"
#include "train/checkpoint/sharded.h"

namespace libai::cli {
namespace {

struct ConvertOptions {
  std::string from;
  std::string to;
  std::string format = "libai";
  std::string quantize = "none";
  std::vector<std::string> quantize_keep;
};

int convert(ConvertOptions options) {
  namespace fs = std::filesystem;
  if (fs::is_directory(options.from) && !fs::exists(fs::path(options.from) / "config.json") &&
      fs::exists(fs::path(options.from) / "last_checkpoint")) {
    auto found = train::last_checkpoint(options.from);
    LIBAI_CHECK_KIND(NotFound, found.has_value(), "--from ", options.from,
                     ": has last_checkpoint but no complete checkpoint folder");
    options.from = found->string();
  }
  // A sharded checkpoint (graph mode's model_NNNNNNN) has no model.safetensors to convert.
  LIBAI_CHECK(!train::is_sharded_checkpoint(options.from) ||
                  fs::exists(fs::path(options.from) / "model.safetensors"),
              "--from ", options.from, " is a sharded training checkpoint: export it with ",
              "`libai-actor checkpoint merge ", options.from, " ", options.to, "`");
  check_model_folder(options.from, "--from");
  const auto layout =
      options.format == "hf" ? models::CheckpointLayout::hf : models::CheckpointLayout::libai;
  const auto start = std::chrono::steady_clock::now();
  models::convert_model(options.from, options.to, layout,
                        ops::parse_quantization(options.quantize, "--quantize"),
                        options.quantize_keep);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::string written = (std::filesystem::path(options.to) / "model.safetensors").string();
  const auto file = checkpoint::SafetensorsFile::open(written);
  uint64_t bytes = 0;
  for (const std::string& name : file.names()) bytes += file.info(name).end - file.info(name).begin;
  std::printf("converted %s -> %s (%s layout): %zu tensors, %.2f MB, %.2f s\n",
              options.from.c_str(), written.c_str(), options.format.c_str(), file.names().size(),
              double(bytes) / 1e6, seconds);
  return kExitOk;
}

}  // namespace

CommandAction setup_convert(CLI::App& command) {
  auto options = std::make_shared<ConvertOptions>();
  command
      .add_option("--from", options->from,
                  "model folder to read (either layout), or a training output folder")
      ->required();
  command.add_option("--to", options->to, "folder to write (created)")->required();
  command.add_option("--format", options->format, "layout to write: libai or hf")
      ->check(CLI::IsMember({"libai", "hf"}));
  command.add_option("--quantize", options->quantize,
                     "write a quantized checkpoint (libai layout) that loads without quantizing "
                     "again: int8, int8-dynamic, q4, q4:GROUP or q4:GROUP:min (docs/MODELS.md)");
  command.add_option("--quantize-keep", options->quantize_keep,
                     "a layer stored in f32 under --quantize (a module name such as layers.0, or "
                     "output for the LM head); repeatable");
  return [options] { return convert(*options); };
}

}  // namespace libai::cli
