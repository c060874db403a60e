// metrics.json: one JSON object a line (metrics.h).
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "train/metrics.h"

namespace libai::train {
namespace {

nlohmann::ordered_json number_or_null(double value) {
  return std::isfinite(value) ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr);
}

class JsonWriter : public MetricsWriter {
 public:
  explicit JsonWriter(const std::filesystem::path& file) : path_(file) {
    if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
    out_.open(file, std::ios::out | std::ios::app);
    LIBAI_CHECK_KIND(IoError, out_.good(), "metrics: cannot open ", file.string(),
                     " for appending");
  }

  void write(const StepMetrics& m) override {
    nlohmann::ordered_json line;
    line["iteration"] = m.iteration;
    if (m.loss) line["loss"] = number_or_null(*m.loss);
    for (const auto& [name, value] : m.scalars) line[name] = number_or_null(value);
    // One line each, flushed: a reader tailing the file never sees half a record.
    out_ << line.dump() << '\n';
    out_.flush();
    LIBAI_CHECK_KIND(IoError, out_.good(), "metrics: writing ", path_.string(), " failed");
  }

  void close() override {
    if (out_.is_open()) out_.close();
  }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace

std::unique_ptr<MetricsWriter> make_json_writer(const std::filesystem::path& file) {
  return std::make_unique<JsonWriter>(file);
}

}  // namespace libai::train
