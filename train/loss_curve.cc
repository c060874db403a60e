// The loss-curve picture written at the end of a run (metrics.h): plain SVG 1.1, no script,
// no external fonts or styles, so any browser or image viewer shows it.
#include <algorithm>
#include <cmath>
#include <fstream>

#include <spdlog/fmt/fmt.h>

#include "runtime/error.h"
#include "runtime/xml.h"
#include "train/metrics.h"

namespace libai::train {
namespace {

constexpr double kWidth = 720, kHeight = 440;
constexpr double kLeft = 72, kRight = 24, kTop = 44, kBottom = 56;  // margins around the plot

struct Range {
  double low = 0, high = 1;
};

// Widens an empty or single-value range so it maps to a visible span.
Range padded(double low, double high, double fraction) {
  if (!(high > low)) {
    const double half = std::max(std::fabs(low) * 0.1, 0.5);
    return {low - half, high + half};
  }
  const double pad = (high - low) * fraction;
  return {low - pad, high + pad};
}

// A 1, 2 or 5 x 10^k step that puts about `count` ticks over the range.
double tick_step(const Range& r, int count) {
  const double raw = (r.high - r.low) / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

std::vector<double> ticks(const Range& r, int count) {
  const double step = tick_step(r, count);
  std::vector<double> out;
  const double first = std::ceil(r.low / step);
  // Bounded: at values far above the step (1e17 with steps of 1) k + 1 == k in doubles.
  for (int i = 0; i < 20; ++i) {
    const double value = (first + i) * step;
    if (!(value <= r.high + step * 1e-9)) break;
    out.push_back(value == 0 ? 0.0 : value);  // no "-0"
  }
  return out;
}

class Plot {
 public:
  Plot(Range x, Range y) : x_(x), y_(y) {}
  double px(double x) const {
    return kLeft + (x - x_.low) / (x_.high - x_.low) * (kWidth - kLeft - kRight);
  }
  double py(double y) const {
    return kHeight - kBottom - (y - y_.low) / (y_.high - y_.low) * (kHeight - kTop - kBottom);
  }
  const Range& x() const { return x_; }
  const Range& y() const { return y_; }

 private:
  Range x_, y_;
};

void draw_axes(std::string& svg, const Plot& plot) {
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kHeight - kBottom, y1 = kTop;
  svg += fmt::format(
      "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"none\" "
      "stroke=\"#444\"/>\n",
      x0, y1, x1 - x0, y0 - y1);
  for (double t : ticks(plot.x(), 6)) {
    const double x = plot.px(t);
    svg += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{0:.2f}\" y2=\"{2:.2f}\" "
        "stroke=\"#444\"/>\n",
        x, y0, y0 + 5);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\">{:.6g}</text>\n", x,
                       y0 + 20, t);
  }
  for (double t : ticks(plot.y(), 6)) {
    const double y = plot.py(t);
    svg += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" "
        "stroke=\"#ddd\"/>\n",
        x0, y, x1, y);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"end\">{:.6g}</text>\n",
                       x0 - 8, y + 4, t);
  }
  svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\">iteration</text>\n",
                     (x0 + x1) / 2, kHeight - 14);
  svg += fmt::format(
      "<text x=\"18\" y=\"{0:.2f}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0:.2f})\">"
      "loss</text>\n",
      (y0 + y1) / 2);
}

}  // namespace

std::string loss_curve_svg(const std::vector<std::pair<int64_t, double>>& train,
                           const std::vector<std::pair<int64_t, double>>& eval,
                           const std::string& title) {
  double x_low = INFINITY, x_high = -INFINITY, y_low = INFINITY, y_high = -INFINITY;
  for (const auto* series : {&train, &eval})
    for (const auto& [iteration, loss] : *series) {
      if (!std::isfinite(loss)) continue;  // a diverged step is not drawn
      x_low = std::min(x_low, double(iteration)), x_high = std::max(x_high, double(iteration));
      y_low = std::min(y_low, loss), y_high = std::max(y_high, loss);
    }
  if (x_low > x_high) x_low = x_high = 0, y_low = y_high = 0;  // nothing to draw: empty axes
  const Plot plot(padded(x_low, x_high, 0.0), padded(y_low, y_high, 0.05));

  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"28\" font-size=\"16\">{3}</text>\n",
      kWidth, kHeight, kLeft, xml_escape(title));
  draw_axes(svg, plot);

  std::string path;
  for (const auto& [iteration, loss] : train) {
    if (!std::isfinite(loss)) continue;
    path += fmt::format("{}{:.2f},{:.2f}", path.empty() ? "M" : " L", plot.px(double(iteration)),
                        plot.py(loss));
  }
  if (!path.empty())
    svg += "<path class=\"train\" d=\"" + path +
           "\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\"/>\n";
  for (const auto& [iteration, loss] : eval) {
    if (!std::isfinite(loss)) continue;
    svg += fmt::format(
        "<circle class=\"eval\" cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3.5\" "
        "fill=\"#d62728\"/>\n",
        plot.px(double(iteration)), plot.py(loss));
  }

  // Legend in the top margin, right-aligned with the plot, so it never hides the curve.
  const double lx = kWidth - kRight - (eval.empty() ? 90 : 190), ly = 22;
  svg += fmt::format(
      "<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" "
      "stroke=\"#1f77b4\" stroke-width=\"1.5\"/>\n"
      "<text x=\"{:.2f}\" y=\"{:.2f}\">train loss</text>\n",
      lx, ly, lx + 20, ly, lx + 26, ly + 4);
  if (!eval.empty())
    svg += fmt::format(
        "<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3.5\" fill=\"#d62728\"/>\n"
        "<text x=\"{:.2f}\" y=\"{:.2f}\">eval loss</text>\n",
        lx + 110, ly, lx + 120, ly + 4);
  svg += "</svg>\n";
  return svg;
}

namespace {

class LossCurveWriter : public MetricsWriter {
 public:
  explicit LossCurveWriter(std::filesystem::path file) : path_(std::move(file)) {}

  void write(const StepMetrics& m) override {
    if (m.loss) train_.emplace_back(m.iteration, *m.loss);
    if (auto it = m.scalars.find("eval/loss"); it != m.scalars.end())
      eval_.emplace_back(m.iteration, it->second);
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path());
    std::ofstream out(path_, std::ios::out | std::ios::trunc);
    out << loss_curve_svg(train_, eval_);
    LIBAI_CHECK_KIND(IoError, out.good(), "metrics: writing ", path_.string(), " failed");
  }

 private:
  std::filesystem::path path_;
  std::vector<std::pair<int64_t, double>> train_, eval_;
  bool closed_ = false;
};

}  // namespace

std::unique_ptr<MetricsWriter> make_loss_curve_writer(const std::filesystem::path& file) {
  return std::make_unique<LossCurveWriter>(file);
}

}  // namespace libai::train
