// ONNX export of a Hugging Face model folder: the model is loaded as the runtime loads it (f32
// on the CPU, bf16 weights converted), its family's exporter (Family::export_onnx) writes the
// graph with the shared blocks (models/onnx/blocks.h), and the written file is checked with
// onnx::checker and ONNX's strict shape inference before the call returns. docs/ONNX.md lists
// the exported families, their inputs, outputs and dynamic axes.
//
//   auto s = models::onnx::export_model("tests/data/models/gpt2", "gpt2.onnx",
//                                       {.opset = 17, .with_past = true});
//   s.written.inputs;    // input_ids, attention_mask, past_key_values.0.key, ...
//
// Errors: NotFound for a folder without config.json; Unsupported for a family, head or option
// that does not export (--with-past for an encoder), or an opset below what the graph needs;
// InternalError when ONNX rejects the graph (an exporter's bug).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "models/onnx/graph.h"

namespace libai::models::onnx {

// The lowest opset any exported graph uses (Split, Squeeze and Unsqueeze take their axes as
// inputs from opset 13; LayerNormalization, from 17, is decomposed before).
constexpr int kMinOpset = 13;

struct ExportOptions {
  int opset = kDefaultOpset;
  // Decoders: past key/values as inputs and present ones as outputs (one step of generation).
  bool with_past = false;
  // Weights in `<out>.data` (ONNX external data); forced past 2 GB of weights.
  bool external_data = false;
};

// The graphs one export writes, which a family's exporter (Family::export_onnx) adds: most
// families one graph, written to the --out file; T5 an encoder and decoders, each written
// beside it as <out stem><suffix><out extension> (t5.onnx -> t5_encoder.onnx, ...).
class ExportGraphs {
 public:
  explicit ExportGraphs(int opset) : opset_(opset) {}
  // A new graph of that name; `suffix` "" writes it to the --out file (once at most).
  GraphBuilder& add(const std::string& graph_name, const std::string& suffix = "");
  // Writes every graph, in the order added, with `options`; the file names from `out`.
  std::vector<WriteSummary> write(const std::filesystem::path& out,
                                  const WriteOptions& options);

 private:
  int opset_;
  std::vector<std::pair<std::string, std::unique_ptr<GraphBuilder>>> graphs_;  // by suffix
};

struct ExportSummary {
  std::string model_type, architecture;  // config.json's
  int opset = 0;
  WriteSummary written;              // the first graph's (the encoder for T5)
  std::vector<WriteSummary> files;   // every graph's, `written` first
};

ExportSummary export_model(const std::filesystem::path& model_dir, const std::filesystem::path& out,
                           const ExportOptions& options = {});

}  // namespace libai::models::onnx
