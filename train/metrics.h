// What a training run reports while it runs: one StepMetrics per logging period, handed to
// writers that show it to a person (the console), keep it for programs (metrics.json), for
// TensorBoard (event files) and draw it at the end (a loss-curve SVG).
//
//   std::vector<std::unique_ptr<train::MetricsWriter>> writers;
//   writers.push_back(train::make_console_writer(/*total_iterations=*/1000));
//   writers.push_back(train::make_json_writer(out / "metrics.json"));
//   writers.push_back(train::make_tensorboard_writer(out / "tensorboard"));
//   writers.push_back(train::make_loss_curve_writer(out / "loss_curve.svg"));
//   config::write_resolved(cfg, out.string());            // out/config.yaml (runtime/config)
//   train::StepMetrics m{.iteration = 120, .loss = 3.21, .scalars = {{"lr", 1.2e-4}}};
//   for (auto& w : writers) w->write(m);
//   ...
//   for (auto& w : writers) w->close();                     // the SVG is written here
//
// Scalar names (all optional; a writer shows what is present): lr, grad_norm, loss_scale,
// samples_per_s, tokens_per_s, gflops (achieved GFLOP/s, see train/flops.h), data_wait_ms,
// step_ms, skipped (1 for a step the loss scaler skipped), and evaluation results under
// "eval/": eval/loss, eval/accuracy, eval/perplexity.
//
// The figures are already reduced over ranks (train_step.h); one rank (rank 0) writes. Writers
// are not thread-safe: one thread writes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace libai::train {

struct StepMetrics {
  int64_t iteration = 0;       // the optimizer step this record follows (1-based)
  std::optional<double> loss;  // the step's training loss; absent in an eval-only record
  std::map<std::string, double> scalars;
};

class MetricsWriter {
 public:
  virtual ~MetricsWriter() = default;
  virtual void write(const StepMetrics& metrics) = 0;
  // Finishes the output (flushes, writes what is drawn from the whole run). Idempotent.
  virtual void close() {}
};

// Seconds on some monotonic clock; injectable so tests control the ETA.
using Clock = std::function<double()>;

// One line per write through logger("train"), e.g.
//   iter 120/1000  loss 3.2101  lr 1.20e-04  grad_norm 0.91  scale 65536  12.3 samples/s
//   4.1k tok/s  35.0 GFLOP/s  data 1.2ms  ETA 3m12s
// (one line; fields absent from the record are left out; eval records read
// "eval iter 120/1000  loss 3.0125  accuracy 0.4210  perplexity 20.39"). The ETA is the
// iterations left times a moving average of the seconds per iteration measured between
// writes, so it includes data loading, evaluation and checkpointing as they happen.
// total_iterations <= 0: no total and no ETA.
std::unique_ptr<MetricsWriter> make_console_writer(int64_t total_iterations, Clock clock = {});

// metrics.json: one JSON object a line, {"iteration": 120, "loss": 3.21, "lr": 0.00012, ...},
// keys in the order iteration, loss, then the scalars by name. The file is appended to (a
// resumed run continues it, so iterations between the checkpoint and a crash appear twice:
// a reader keeps the last record of each iteration) and flushed after each line. Non-finite
// values are written as null (JSON has no NaN).
std::unique_ptr<MetricsWriter> make_json_writer(const std::filesystem::path& file);

// TensorBoard event files: `log_dir`/events.out.tfevents.<unix seconds>.<host>, read by
// TensorBoard's scalar dashboard. Tags: "train/loss" and "train/<name>" per scalar; a name that
// already has a '/' (eval/loss) is its own tag. Flushed after each write. Note [TensorBoard
// event files] in tensorboard_writer.cc has the format.
std::unique_ptr<MetricsWriter> make_tensorboard_writer(const std::filesystem::path& log_dir);

// Keeps (iteration, loss) and (iteration, eval/loss) and writes loss_curve_svg to `file` on
// close().
std::unique_ptr<MetricsWriter> make_loss_curve_writer(const std::filesystem::path& file);

// A self-contained SVG picture: the training loss as one path (one point per finite entry, in
// the given order), evaluation losses as circles, axes with ticks and labels, a legend and a
// title. Either series may be empty.
std::string loss_curve_svg(const std::vector<std::pair<int64_t, double>>& train,
                           const std::vector<std::pair<int64_t, double>>& eval,
                           const std::string& title = "Loss");

}  // namespace libai::train
