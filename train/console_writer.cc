// The console line of each logging period (metrics.h).
#include <chrono>
#include <cmath>
#include <deque>

#include <spdlog/fmt/fmt.h>

#include "runtime/logging.h"
#include "train/metrics.h"

namespace libai::train {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 950 -> "950", 4100 -> "4.1k", 2.5e6 -> "2.5M": throughputs vary over six orders of magnitude.
std::string human_count(double value) {
  const double magnitude = std::fabs(value);
  if (magnitude >= 1e9) return fmt::format("{:.1f}G", value / 1e9);
  if (magnitude >= 1e6) return fmt::format("{:.1f}M", value / 1e6);
  if (magnitude >= 1e3) return fmt::format("{:.1f}k", value / 1e3);
  return fmt::format("{:.1f}", value);
}

// 45 -> "45s", 192 -> "3m12s", 7260 -> "2h01m", 200000 -> "2d07h".
std::string human_duration(double seconds) {
  const int64_t s = int64_t(std::llround(std::max(seconds, 0.0)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

// Seconds per iteration over the last `kWindow` intervals between writes: recent enough to
// follow a change of speed (evaluation starting, a slower phase), long enough to smooth noise.
class IterationTimer {
 public:
  void record(double now, int64_t iteration) {
    if (last_time_ && iteration > last_iteration_) {
      intervals_.push_back({now - *last_time_, iteration - last_iteration_});
      if (intervals_.size() > kWindow) intervals_.pop_front();
    }
    last_time_ = now;
    last_iteration_ = iteration;
  }
  std::optional<double> seconds_per_iteration() const {
    double seconds = 0;
    int64_t iterations = 0;
    for (const auto& [dt, di] : intervals_) seconds += dt, iterations += di;
    if (iterations == 0) return std::nullopt;
    return seconds / double(iterations);
  }

 private:
  static constexpr size_t kWindow = 20;
  std::deque<std::pair<double, int64_t>> intervals_;
  std::optional<double> last_time_;
  int64_t last_iteration_ = 0;
};

class ConsoleWriter : public MetricsWriter {
 public:
  ConsoleWriter(int64_t total, Clock clock)
      : total_(total), clock_(clock ? std::move(clock) : Clock(steady_seconds)) {}

  void write(const StepMetrics& m) override {
    const bool eval_only = !m.loss && has_eval(m);
    std::string line = eval_only ? "eval " : "";
    line += total_ > 0 ? fmt::format("iter {}/{}", m.iteration, total_)
                       : fmt::format("iter {}", m.iteration);
    if (eval_only) {
      append_eval(line, m);
    } else {
      timer_.record(clock_(), m.iteration);
      append_train(line, m);
      if (has_eval(m)) {
        line += "  eval";
        append_eval(line, m);
      }
      const auto per_iteration = timer_.seconds_per_iteration();
      if (total_ > 0 && per_iteration)
        line += "  ETA " +
                human_duration(*per_iteration * double(std::max<int64_t>(total_ - m.iteration, 0)));
    }
    logger("train")->info("{}", line);
  }

 private:
  static bool has_eval(const StepMetrics& m) {
    for (const auto& [name, value] : m.scalars)
      if (name.rfind("eval/", 0) == 0) return true;
    return false;
  }

  static const double* find(const StepMetrics& m, const std::string& name) {
    auto it = m.scalars.find(name);
    return it == m.scalars.end() ? nullptr : &it->second;
  }

  static void append_train(std::string& line, const StepMetrics& m) {
    if (m.loss) line += fmt::format("  loss {:.4f}", *m.loss);
    if (auto* v = find(m, "skipped"); v && *v != 0) line += "  (skipped: inf/nan gradients)";
    if (auto* v = find(m, "lr")) line += fmt::format("  lr {:.2e}", *v);
    if (auto* v = find(m, "grad_norm")) line += fmt::format("  grad_norm {:.2f}", *v);
    if (auto* v = find(m, "loss_scale")) line += fmt::format("  scale {:g}", *v);
    if (auto* v = find(m, "samples_per_s")) line += "  " + human_count(*v) + " samples/s";
    if (auto* v = find(m, "tokens_per_s")) line += "  " + human_count(*v) + " tok/s";
    if (auto* v = find(m, "gflops")) line += fmt::format("  {:.1f} GFLOP/s", *v);
    if (auto* v = find(m, "data_wait_ms")) line += fmt::format("  data {:.1f}ms", *v);
  }

  static void append_eval(std::string& line, const StepMetrics& m) {
    for (const auto& [name, value] : m.scalars) {
      if (name.rfind("eval/", 0) != 0) continue;
      const std::string shown = name.substr(5);
      line += shown == "perplexity" ? fmt::format("  {} {:.2f}", shown, value)
                                    : fmt::format("  {} {:.4f}", shown, value);
    }
  }

  int64_t total_;
  Clock clock_;
  IterationTimer timer_;
};

}  // namespace

std::unique_ptr<MetricsWriter> make_console_writer(int64_t total_iterations, Clock clock) {
  return std::make_unique<ConsoleWriter>(total_iterations, std::move(clock));
}

}  // namespace libai::train
