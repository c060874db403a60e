#include "schedule/svg.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/error.h"

namespace libai::schedule {
namespace {

// A small well-formedness check: tags nest and close, attributes are quoted, text has no
// raw '<' or '&' outside entities. Returns "" or what is wrong.
std::string xml_problem(const std::string& doc) {
  std::vector<std::string> open;
  size_t i = 0;
  if (doc.rfind("<?xml", 0) == 0) i = doc.find("?>") + 2;
  while (i < doc.size()) {
    if (doc[i] == '&') {
      const size_t semi = doc.find(';', i);
      if (semi == std::string::npos || semi - i > 6) return "bare & at " + std::to_string(i);
      i = semi + 1;
      continue;
    }
    if (doc[i] != '<') {
      ++i;
      continue;
    }
    size_t end = i + 1;
    bool quoted = false;
    for (; end < doc.size() && (quoted || doc[end] != '>'); ++end) {
      if (doc[end] == '"') quoted = !quoted;
      if (!quoted && doc[end] == '<') return "'<' inside a tag at " + std::to_string(end);
    }
    if (end >= doc.size()) return "unterminated tag at " + std::to_string(i);
    std::string tag = doc.substr(i + 1, end - i - 1);
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "unbalanced </" + name + ">";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
    i = end + 1;
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  return "";
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Svg, OneRectanglePerActionInAWellFormedPicture) {
  const StageCosts costs{.forward = {1e-3, 2e-3, 1e-3}, .backward = {2e-3, 4e-3, 2e-3}};
  const Timeline t = simulate(one_f_one_b(3, 5), costs);
  const std::string svg = render_timeline_svg(t, 3, {.title = "1F1B <p=3> & m=5"});
  EXPECT_EQ(xml_problem(svg), "") << svg;
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_EQ(count(svg, "<rect"), t.events.size());
  EXPECT_EQ(count(svg, "fill=\"#59a14f\""), 15u);  // the backwards
  // Step time in milliseconds: stage 1 is the bottleneck, 5 x 6 ms + fill and drain.
  char expected[64];
  std::snprintf(expected, sizeof expected, "step time %.3f ms", t.step_time * 1e3);
  EXPECT_NE(svg.find(expected), std::string::npos) << svg;
  EXPECT_NE(svg.find("1F1B &lt;p=3&gt; &amp; m=5"), std::string::npos);
  EXPECT_NE(svg.find("stage 2"), std::string::npos);
  EXPECT_NE(svg.find("<title>stage 0 F0: 0.000-1.000 ms</title>"), std::string::npos) << svg;
}

TEST(Svg, DecodingStepsAndOtherUnits) {
  const Timeline t = simulate(decode_program(2, 2, 3), StageCosts{.forward = {1, 1}});
  const std::string svg =
      render_timeline_svg(t, 2, {.width = 400, .time_scale = 1.0, .time_unit = "units"});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<rect"), 12u);
  EXPECT_EQ(count(svg, "fill=\"#76b7b2\""), 8u);  // steps 1 and 2 of 2 groups on 2 stages
  EXPECT_NE(svg.find("step time 7.000 units"), std::string::npos) << svg;  // (T G + p - 1) f
  EXPECT_NE(svg.find("F1.2"), std::string::npos);
  EXPECT_THROW(render_timeline_svg(t, 0), InvalidArgument);
}

TEST(Svg, AnEmptyTimelineIsStillAPicture) {
  const std::string svg = render_timeline_svg(Timeline{}, 2);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<rect"), 0u);
  EXPECT_NE(svg.find("step time 0.000 ms"), std::string::npos);
}

}  // namespace
}  // namespace libai::schedule
