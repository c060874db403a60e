#include "schedule/svg.h"

#include <cmath>
#include <cstdio>

#include "runtime/error.h"
#include "runtime/xml.h"

namespace libai::schedule {
namespace {

std::string number(double v, int decimals = 2) {
  char out[64];
  std::snprintf(out, sizeof out, "%.*f", decimals, v);
  return out;
}

// A tick spacing of 1, 2 or 5 times a power of ten giving at most ~10 ticks.
double tick_step(double span) {
  if (span <= 0) return 1;
  const double raw = span / 10, power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

// Significant decimals for values that are multiples of `step`.
int decimals_for(double step) { return std::max(0, int(std::ceil(-std::log10(step)))); }

}  // namespace

std::string render_timeline_svg(const Timeline& timeline, int num_stages,
                                const SvgOptions& options) {
  LIBAI_CHECK(num_stages >= 1, "render_timeline_svg: num_stages is ", num_stages);
  LIBAI_CHECK(options.width >= 50 && options.row_height >= 8, "render_timeline_svg: width ",
              options.width, " and row_height ", options.row_height,
              " must be at least 50 and 8 pixels");
  LIBAI_CHECK(options.time_scale > 0, "render_timeline_svg: time_scale must be > 0");
  const int left = 70, top = options.title.empty() ? 10 : 34, right = 20;
  const int rows_height = num_stages * options.row_height;
  const int height = top + rows_height + 56;
  const int width = left + options.width + right;
  const double span = timeline.step_time * options.time_scale;  // in axis units
  const double px = span > 0 ? options.width / span : 0.0;      // pixels per axis unit
  const std::string& unit = options.time_unit;

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += str_cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"",
                 height, "\" viewBox=\"0 0 ", width, " ", height,
                 "\" font-family=\"sans-serif\" font-size=\"11\">\n");
  if (!options.title.empty())
    svg += str_cat("<text x=\"", left, "\" y=\"20\" font-size=\"14\">", xml_escape(options.title),
                   "</text>\n");
  for (int s = 0; s < num_stages; ++s) {
    const int y = top + s * options.row_height + options.row_height / 2 + 4;
    const double used = s < int(timeline.utilisation.size()) ? timeline.utilisation[size_t(s)] : 0;
    svg += str_cat("<text x=\"4\" y=\"", y, "\">stage ", s, "</text>\n");
    svg += str_cat("<text x=\"", left + options.width + 2, "\" y=\"", y,
                   "\" font-size=\"9\" fill=\"#555\">", int(used * 100 + 0.5), "%</text>\n");
  }
  // Actions.
  svg += "<g stroke=\"#fff\" stroke-width=\"0.5\">\n";
  for (const TimelineEvent& e : timeline.events) {
    const double x = left + e.start * options.time_scale * px;
    const double w = std::max(0.5, (e.end - e.start) * options.time_scale * px);
    const double y = top + e.stage * options.row_height + 2;
    const double h = options.row_height - 4;
    const bool decoding = e.action.kind == ActionKind::forward && e.action.step > 0;
    const char* fill = e.action.kind == ActionKind::backward ? "#59a14f"
                       : decoding                            ? "#76b7b2"
                                                             : "#4e79a7";
    const std::string name = to_string(e.action);
    svg +=
        str_cat("<rect x=\"", number(x), "\" y=\"", number(y), "\" width=\"", number(w),
                "\" height=\"", number(h), "\" fill=\"", fill, "\"><title>stage ", e.stage, " ",
                name, ": ", number(e.start * options.time_scale, 3), "-",
                number(e.end * options.time_scale, 3), " ", xml_escape(unit), "</title></rect>\n");
    // The label without its kind letter: the colour says the kind.
    const std::string label = name.substr(1);
    if (w >= 7.0 * double(label.size()) + 2)
      svg +=
          str_cat("<text x=\"", number(x + w / 2), "\" y=\"", number(y + h / 2 + 4),
                  "\" text-anchor=\"middle\" fill=\"#fff\" stroke=\"none\">", label, "</text>\n");
  }
  svg += "</g>\n";
  // Time axis.
  const int axis_y = top + rows_height + 4;
  svg += str_cat("<g stroke=\"#333\"><line x1=\"", left, "\" y1=\"", axis_y, "\" x2=\"",
                 left + options.width, "\" y2=\"", axis_y, "\"/>\n");
  const double step = tick_step(span);
  const int decimals = decimals_for(step);
  for (int i = 0; span > 0 && i * step <= span * (1 + 1e-9); ++i) {
    const double x = left + i * step * px;
    svg += str_cat("<line x1=\"", number(x), "\" y1=\"", axis_y, "\" x2=\"", number(x), "\" y2=\"",
                   axis_y + 4, "\"/><text x=\"", number(x), "\" y=\"", axis_y + 16,
                   "\" text-anchor=\"middle\" stroke=\"none\">", number(i * step, decimals),
                   "</text>\n");
  }
  svg += "</g>\n";
  svg += str_cat("<text x=\"", left, "\" y=\"", axis_y + 36, "\">step time ", number(span, 3), " ",
                 xml_escape(unit), " (", xml_escape(unit),
                 " on the axis; blue: forward, teal: decoding step, green: backward)</text>\n");
  svg += "</svg>\n";
  return svg;
}

}  // namespace libai::schedule
