// `libai-actor export onnx --model DIR --out FILE [--opset N] [--with-past] [--external-data]`:
// writes the model of a Hugging Face folder as an ONNX graph (models/onnx/export.h), checked
// with onnx::checker before it reports. Prints one line: what was written, its inputs and
// outputs, and how long it took. docs/ONNX.md lists what each family exports.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "bin/commands.h"
#include "models/onnx/export.h"

namespace libai::cli {
namespace {

struct OnnxOptions {
  std::string model;
  std::string out;
  models::onnx::ExportOptions export_options;
};

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

int export_onnx(const OnnxOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto s = models::onnx::export_model(options.model, options.out, options.export_options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& file : s.files) {
    std::printf("exported %s (%s %s) -> %s%s%s: opset %d, %lld nodes, %.2f MB of weights\n",
                options.model.c_str(), s.model_type.c_str(), s.architecture.c_str(),
                file.model.c_str(), file.data.empty() ? "" : " + ", file.data.c_str(), s.opset,
                static_cast<long long>(file.nodes), double(file.weight_bytes) / 1e6);
    std::printf("  inputs:  %s\n  outputs: %s\n", joined(file.inputs).c_str(),
                joined(file.outputs).c_str());
  }
  std::printf("  %.2f s\n", seconds);
  return kExitOk;
}

}  // namespace

CommandAction setup_export(CLI::App& command) {
  command.require_subcommand(1);
  auto options = std::make_shared<OnnxOptions>();
  CLI::App* onnx = command.add_subcommand(
      "onnx", "write an ONNX model (checked with onnx::checker) from a model folder");
  onnx->add_option("--model", options->model, "Hugging Face model folder")->required();
  onnx->add_option("--out", options->out, "the .onnx file to write")->required();
  onnx->add_option("--opset", options->export_options.opset, "ONNX opset (13 to 17)")
      ->capture_default_str();
  onnx->add_flag("--with-past", options->export_options.with_past,
                 "decoders: past key/values in, present key/values out (one generation step)");
  onnx->add_flag("--external-data", options->export_options.external_data,
                 "weights in FILE.data beside the model (always past 2 GB)");
  return [options, onnx] { return onnx->parsed() ? export_onnx(*options) : kExitUsage; };
}

}  // namespace libai::cli
