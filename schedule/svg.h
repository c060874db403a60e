// A timeline as a standalone SVG picture: one row per stage, one rectangle per action
// (coloured by kind: forward, decoding step, backward; labelled with its micro-batch or
// group, and its step), a time axis, and the step time. Hovering a rectangle shows the
// action and its start and end.
//
//   Timeline t = simulate(one_f_one_b(4, 8), costs);
//   std::ofstream("plan.svg") << render_timeline_svg(t, 4, {.title = "gpt2, pp 4"});
#pragma once

#include <string>

#include "schedule/program.h"

namespace libai::schedule {

struct SvgOptions {
  std::string title;        // shown above the chart (escaped)
  int width = 960;          // pixels of the time axis
  int row_height = 28;      // pixels per stage
  double time_scale = 1e3;  // axis units per second of the timeline (1e3: milliseconds)
  std::string time_unit = "ms";
};

std::string render_timeline_svg(const Timeline& timeline, int num_stages,
                                const SvgOptions& options = {});

}  // namespace libai::schedule
