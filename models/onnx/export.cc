#include "models/onnx/export.h"

#include "models/family.h"
#include "models/model.h"

namespace libai::models::onnx {

namespace fs = std::filesystem;

GraphBuilder& ExportGraphs::add(const std::string& graph_name, const std::string& suffix) {
  for (const auto& [taken, graph] : graphs_)
    LIBAI_CHECK_KIND(InternalError, taken != suffix, "onnx export: two graphs named by the suffix \"",
                     suffix, "\"");
  graphs_.emplace_back(suffix, std::make_unique<GraphBuilder>(graph_name, opset_));
  return *graphs_.back().second;
}

std::vector<WriteSummary> ExportGraphs::write(const fs::path& out, const WriteOptions& options) {
  LIBAI_CHECK_KIND(InternalError, !graphs_.empty(), "onnx export: the exporter added no graph");
  std::vector<WriteSummary> written;
  for (auto& [suffix, graph] : graphs_) {
    fs::path file = out;
    if (!suffix.empty())
      file.replace_filename(out.stem().string() + suffix + out.extension().string());
    written.push_back(graph->write(file, options));
    graph.reset();  // its weights' transposed copies go before the next one is written
  }
  return written;
}

ExportSummary export_model(const fs::path& model_dir, const fs::path& out,
                           const ExportOptions& options) {
  const std::string where = "onnx export: model folder " + model_dir.string();
  LIBAI_CHECK_KIND(NotFound, fs::is_directory(model_dir), where, ": no such folder");
  LIBAI_CHECK_KIND(NotFound, fs::exists(model_dir / "config.json"), where,
                   ": no config.json (not a Hugging Face or libai model folder)");
  LIBAI_CHECK(!out.empty(), "onnx export: no output file given");
  const HfConfig config = HfConfig::load(model_dir);
  const Family& family = family_of(config);
  LIBAI_CHECK_KIND(Unsupported, family.export_onnx != nullptr, where, ": model_type \"",
                   family.model_type, "\" has no ONNX export (exported: ",
                   family_names([](const Family& f) { return f.export_onnx != nullptr; }), ")");
  LIBAI_CHECK_KIND(Unsupported, !options.with_past || family.generates != GenerationKind::none,
                   where, ": --with-past exports a decoder's key/value cache, and model_type \"",
                   family.model_type, "\" (", config.architecture(), ") has no decoder");
  LIBAI_CHECK_KIND(Unsupported, options.opset >= kMinOpset && options.opset <= kMaxOpset,
                   "onnx export: opset ", options.opset, " is not supported: the exported ",
                   "graphs need opset ", kMinOpset, " or later (Split, Squeeze and Unsqueeze ",
                   "with axes as inputs), and this build writes up to ", kMaxOpset);

  const auto model = load_model(model_dir);  // f32 on the CPU, as the runtime computes
  ExportGraphs graphs(options.opset);
  family.export_onnx(*model, options, graphs);

  ExportSummary summary;
  summary.model_type = family.model_type;
  summary.architecture = config.architecture();
  summary.opset = options.opset;
  summary.files = graphs.write(out, {.external_data = options.external_data});
  summary.written = summary.files.front();
  return summary;
}

}  // namespace libai::models::onnx
