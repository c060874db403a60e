// The metrics writers of train/metrics.h: the console line (captured through a spdlog sink, ETA
// from a controlled clock), metrics.json read back line by line, the TensorBoard event file
// read back here (TFRecord framing, CRC-32C checked, the Event protos decoded by a small
// protobuf reader written in this test) and the loss-curve SVG (tags balance, one path point
// per finite loss). CRC-32C is checked against published vectors (RFC 3720 B.4).
//
// TensorBoard itself read the event file this test writes (kept at
// <build>/tests/metrics_test_out/tensorboard): tools/check_tensorboard.py, with the
// `tensorboard` package's EventAccumulator, printed the steps and values written below.
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/logging.h"
#include "train/crc32c.h"
#include "train/metrics.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;

fs::path output_dir(const std::string& name) {
  fs::path dir = fs::path(LIBAI_BINARY_DIR) / "tests" / "metrics_test_out" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(Crc32c, PublishedVectors) {
  EXPECT_EQ(crc32c(""), 0x00000000u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);    // RFC 3720 B.4: 32 zeros
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);  // 32 bytes of 0xFF
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[size_t(i)] = char(i);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  // TFRecord's mask: rotate right by 15, then add the constant.
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(mask_crc32c(c), uint32_t(((c >> 15) | (c << 17)) + 0xA282EAD8u));
}

// Captures what logger("train") prints, message text only.
class ConsoleCapture {
 public:
  ConsoleCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)) {
    sink_->set_pattern("%v");
    logger("train")->sinks().push_back(sink_);
  }
  ~ConsoleCapture() {
    auto& sinks = logger("train")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(stream_.str());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST(ConsoleWriter, LineFormatAndEta) {
  ConsoleCapture capture;
  double now = 0;
  auto writer = make_console_writer(1000, [&now] { return now; });
  const std::map<std::string, double> scalars = {{"lr", 1.2e-4},           {"grad_norm", 0.9132},
                                                 {"samples_per_s", 12.34}, {"tokens_per_s", 4120},
                                                 {"gflops", 35.02},        {"data_wait_ms", 1.21}};
  writer->write({.iteration = 100, .loss = 3.21014, .scalars = scalars});
  now = 25;  // 20 iterations in 25 s: 1.25 s each, 880 left
  writer->write({.iteration = 120, .loss = 3.21014, .scalars = scalars});
  now = 45;  // 20 more in 20 s: the window's mean is 45 s / 40 iterations, 860 left
  writer->write({.iteration = 140, .loss = 2.5, .scalars = {{"loss_scale", 65536}}});
  writer->write({.iteration = 140,
                 .scalars = {{"eval/loss", 3.01249}, {"eval/perplexity", std::exp(3.01249)}}});
  const auto lines = capture.lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "iter 100/1000  loss 3.2101  lr 1.20e-04  grad_norm 0.91  12.3 samples/s  4.1k tok/s"
            "  35.0 GFLOP/s  data 1.2ms");  // no interval measured yet: no ETA
  EXPECT_EQ(lines[1],
            "iter 120/1000  loss 3.2101  lr 1.20e-04  grad_norm 0.91  12.3 samples/s  4.1k tok/s"
            "  35.0 GFLOP/s  data 1.2ms  ETA 18m20s");  // 880 x 1.25 s = 1100 s
  EXPECT_EQ(lines[2],
            "iter 140/1000  loss 2.5000  scale 65536  ETA 16m08s");  // 860 x 1.125 s = 967.5 s
  EXPECT_EQ(lines[3], "eval iter 140/1000  loss 3.0125  perplexity 20.34");
}

TEST(ConsoleWriter, NoTotalNoEta) {
  ConsoleCapture capture;
  double now = 0;
  auto writer = make_console_writer(0, [&now] { return now; });
  writer->write({.iteration = 1, .loss = 1.0});
  now = 1;
  writer->write({.iteration = 2, .loss = 0.5, .scalars = {{"tokens_per_s", 2.5e6}}});
  const auto lines = capture.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "iter 2  loss 0.5000  2.5M tok/s");
}

TEST(JsonWriter, LinesParseBackAndResumeAppends) {
  const fs::path file = output_dir("json") / "metrics.json";
  {
    auto writer = make_json_writer(file);
    writer->write({.iteration = 1, .loss = 2.5, .scalars = {{"lr", 1e-4}, {"grad_norm", 3.0}}});
    writer->write({.iteration = 2, .loss = NAN, .scalars = {{"loss_scale", 32768}}});
    writer->close();
  }
  {
    auto writer = make_json_writer(file);  // a resumed run continues the file
    writer->write({.iteration = 3, .scalars = {{"eval/loss", 2.25}}});
  }
  std::ifstream in(file);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            nlohmann::json::parse(R"({"iteration":1,"loss":2.5,"lr":1e-4,"grad_norm":3.0})"));
  EXPECT_EQ(lines[1]["iteration"], 2);
  EXPECT_TRUE(lines[1]["loss"].is_null());  // NaN has no JSON spelling
  EXPECT_EQ(lines[1]["loss_scale"], 32768.0);
  EXPECT_EQ(lines[2], nlohmann::json::parse(R"({"iteration":3,"eval/loss":2.25})"));
  EXPECT_FALSE(lines[2].contains("loss"));
}

// --- A protobuf reader for the few wire types an Event uses -------------------------------

struct Field {
  int number = 0, wire_type = 0;
  uint64_t integer = 0;  // varint, fixed64, fixed32
  std::string bytes;     // length-delimited
};

uint64_t read_varint(const std::string& data, size_t& at) {
  uint64_t value = 0;
  for (int shift = 0;; shift += 7) {
    if (at >= data.size() || shift > 63) throw std::runtime_error("truncated varint");
    const auto byte = uint8_t(data[at++]);
    value |= uint64_t(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return value;
  }
}

uint64_t read_little_endian(const std::string& data, size_t& at, int bytes) {
  if (at + size_t(bytes) > data.size()) throw std::runtime_error("truncated fixed field");
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t(uint8_t(data[at + size_t(i)])) << (8 * i);
  at += size_t(bytes);
  return value;
}

std::vector<Field> decode_message(const std::string& data) {
  std::vector<Field> fields;
  for (size_t at = 0; at < data.size();) {
    const uint64_t key = read_varint(data, at);
    Field f{.number = int(key >> 3), .wire_type = int(key & 7)};
    switch (f.wire_type) {
      case 0: f.integer = read_varint(data, at); break;
      case 1: f.integer = read_little_endian(data, at, 8); break;
      case 5: f.integer = read_little_endian(data, at, 4); break;
      case 2: {
        const uint64_t length = read_varint(data, at);
        if (at + length > data.size()) throw std::runtime_error("truncated bytes field");
        f.bytes = data.substr(at, length);
        at += length;
        break;
      }
      default: throw std::runtime_error("unexpected wire type " + std::to_string(f.wire_type));
    }
    fields.push_back(f);
  }
  return fields;
}

double as_double(const Field& f) {
  double d;
  std::memcpy(&d, &f.integer, 8);
  return d;
}
float as_float(const Field& f) {
  const auto bits = uint32_t(f.integer);
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// The data of each TFRecord, with its two CRCs checked.
std::vector<std::string> read_tfrecords(const std::string& file) {
  std::vector<std::string> records;
  for (size_t at = 0; at < file.size();) {
    const size_t start = at;
    const uint64_t length = read_little_endian(file, at, 8);
    const auto length_crc = uint32_t(read_little_endian(file, at, 4));
    EXPECT_EQ(length_crc, masked_crc32c(file.substr(start, 8))) << "record at " << start;
    if (at + length + 4 > file.size()) throw std::runtime_error("truncated record");
    std::string data = file.substr(at, length);
    at += length;
    const auto data_crc = uint32_t(read_little_endian(file, at, 4));
    EXPECT_EQ(data_crc, masked_crc32c(data)) << "record at " << start;
    records.push_back(std::move(data));
  }
  return records;
}

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

DecodedEvent decode_event(const std::string& data) {
  DecodedEvent event;
  for (const Field& f : decode_message(data)) {
    if (f.number == 1 && f.wire_type == 1) event.wall_time = as_double(f);
    if (f.number == 2 && f.wire_type == 0) event.step = int64_t(f.integer);
    if (f.number == 3 && f.wire_type == 2) event.file_version = f.bytes;
    if (f.number == 5 && f.wire_type == 2)
      for (const Field& value : decode_message(f.bytes)) {
        EXPECT_EQ(value.number, 1);  // Summary.value
        std::pair<std::string, float> scalar;
        for (const Field& v : decode_message(value.bytes)) {
          if (v.number == 1 && v.wire_type == 2) scalar.first = v.bytes;
          if (v.number == 2 && v.wire_type == 5) scalar.second = as_float(v);
        }
        event.values.push_back(scalar);
      }
  }
  return event;
}

TEST(TensorBoardWriter, RecordsReadBack) {
  const fs::path dir = output_dir("tensorboard");
  {
    auto writer = make_tensorboard_writer(dir);
    for (int64_t step = 1; step <= 3; ++step)
      writer->write({.iteration = step * 10,
                     .loss = 4.0 / double(step),
                     .scalars = {{"lr", 1e-4 * double(step)}, {"tokens_per_s", 4096}}});
    writer->write({.iteration = 30, .scalars = {{"eval/loss", 1.5}, {"eval/accuracy", 0.25}}});
    writer->close();
  }
  std::vector<fs::path> files(fs::directory_iterator(dir), fs::directory_iterator{});
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.", 0), 0u);

  const auto records = read_tfrecords(read_file(files[0]));
  ASSERT_EQ(records.size(), 5u);
  const DecodedEvent first = decode_event(records[0]);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  EXPECT_GT(first.wall_time, 1.6e9);  // seconds since 1970, after 2020
  EXPECT_TRUE(first.values.empty());
  for (int64_t step = 1; step <= 3; ++step) {
    const DecodedEvent e = decode_event(records[size_t(step)]);
    EXPECT_EQ(e.step, step * 10);
    EXPECT_GE(e.wall_time, first.wall_time);
    const std::vector<std::pair<std::string, float>> expected = {
        {"train/loss", float(4.0 / double(step))},
        {"train/lr", float(1e-4 * double(step))},
        {"train/tokens_per_s", 4096.0f}};
    EXPECT_EQ(e.values, expected);
  }
  const DecodedEvent eval = decode_event(records[4]);
  EXPECT_EQ(eval.step, 30);
  const std::vector<std::pair<std::string, float>> expected_eval = {{"eval/accuracy", 0.25f},
                                                                    {"eval/loss", 1.5f}};
  EXPECT_EQ(eval.values, expected_eval);
}

// --- SVG ------------------------------------------------------------------------------------

// Checks that every element closes in order (and nothing else is left open); returns the
// element names in document order.
std::vector<std::string> check_tags_balance(const std::string& xml) {
  std::vector<std::string> open, names;
  for (size_t at = xml.find('<'); at != std::string::npos; at = xml.find('<', at + 1)) {
    const size_t end = xml.find('>', at);
    EXPECT_NE(end, std::string::npos) << "unterminated tag at " << at;
    if (end == std::string::npos) break;
    const std::string tag = xml.substr(at + 1, end - at - 1);
    if (tag.starts_with("?") || tag.starts_with("!")) continue;  // declaration, comment
    if (tag.starts_with("/")) {
      EXPECT_FALSE(open.empty()) << "closing " << tag << " with nothing open";
      if (open.empty()) break;
      EXPECT_EQ(tag.substr(1), open.back());
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    names.push_back(name);
    if (!tag.ends_with("/")) open.push_back(name);
  }
  EXPECT_TRUE(open.empty()) << open.size() << " elements left open";
  for (size_t at = xml.find('&'); at != std::string::npos; at = xml.find('&', at + 1)) {
    const std::string rest = xml.substr(at, 6);
    EXPECT_TRUE(rest.starts_with("&amp;") || rest.starts_with("&lt;") || rest.starts_with("&gt;") ||
                rest.starts_with("&quot;"))
        << "bare & at " << at;
  }
  return names;
}

std::string attribute_of(const std::string& xml, const std::string& marker,
                         const std::string& attribute) {
  const size_t element = xml.find(marker);
  if (element == std::string::npos) return "";
  const size_t start = xml.find(attribute + "=\"", element) + attribute.size() + 2;
  return xml.substr(start, xml.find('"', start) - start);
}

std::vector<std::pair<double, double>> path_points(const std::string& d) {
  std::vector<std::pair<double, double>> points;
  std::istringstream in(d);
  for (std::string token; in >> token;) {
    if (token == "M" || token == "L") continue;
    if (token[0] == 'M' || token[0] == 'L') token = token.substr(1);
    const size_t comma = token.find(',');
    points.emplace_back(std::stod(token.substr(0, comma)), std::stod(token.substr(comma + 1)));
  }
  return points;
}

TEST(LossCurveSvg, WellFormedWithOnePointPerLoss) {
  std::vector<std::pair<int64_t, double>> train, eval;
  for (int64_t i = 1; i <= 50; ++i) train.emplace_back(i * 10, 5.0 / std::sqrt(double(i)));
  for (int64_t i = 1; i <= 5; ++i) eval.emplace_back(i * 100, 5.2 / std::sqrt(double(i * 10)));
  const std::string svg = loss_curve_svg(train, eval, "GPT-2 <small> & friends");
  std::ofstream(output_dir("svg_example") / "loss_curve.svg") << svg;  // to look at

  const auto names = check_tags_balance(svg);
  EXPECT_EQ(names.front(), "svg");
  EXPECT_EQ(std::count(names.begin(), names.end(), "path"), 1);
  EXPECT_NE(svg.find("GPT-2 &lt;small&gt; &amp; friends"), std::string::npos);
  EXPECT_NE(svg.find(">iteration</text>"), std::string::npos);
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);

  const auto points = path_points(attribute_of(svg, "class=\"train\"", "d"));
  ASSERT_EQ(points.size(), train.size());
  for (size_t i = 1; i < points.size(); ++i) {
    EXPECT_GT(points[i].first, points[i - 1].first);    // iterations go right
    EXPECT_GT(points[i].second, points[i - 1].second);  // a falling loss goes down the page
  }
  // x is linear in the iteration: equal steps, equal distances.
  EXPECT_NEAR(points[1].first - points[0].first, points[49].first - points[48].first, 0.02);
  size_t circles = 0;
  for (size_t at = svg.find("class=\"eval\""); at != std::string::npos;
       at = svg.find("class=\"eval\"", at + 1))
    ++circles;
  EXPECT_EQ(circles, eval.size());
  // Ticks: the x axis from 10 to 500 gets labels at round numbers.
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
}

TEST(LossCurveSvg, EdgeCasesStayWellFormed) {
  check_tags_balance(loss_curve_svg({}, {}));
  check_tags_balance(loss_curve_svg({{7, 2.0}}, {}));  // one point, a zero range
  check_tags_balance(loss_curve_svg({{1, 1e17}, {2, 1e17 + 64}}, {{1, -1e300}}));  // extremes
  const std::string svg = loss_curve_svg({{1, 3.0}, {2, NAN}, {3, INFINITY}, {4, 2.0}}, {});
  check_tags_balance(svg);
  EXPECT_EQ(path_points(attribute_of(svg, "class=\"train\"", "d")).size(), 2u);
}

TEST(LossCurveWriter, WritesOnClose) {
  const fs::path file = output_dir("svg") / "loss_curve.svg";
  auto writer = make_loss_curve_writer(file);
  writer->write({.iteration = 1, .loss = 3.0});
  writer->write({.iteration = 2, .loss = 2.0, .scalars = {{"eval/loss", 2.5}}});
  EXPECT_FALSE(fs::exists(file));
  writer->close();
  const std::string svg = read_file(file);
  check_tags_balance(svg);
  EXPECT_EQ(path_points(attribute_of(svg, "class=\"train\"", "d")).size(), 2u);
  EXPECT_NE(svg.find("class=\"eval\""), std::string::npos);
}

}  // namespace
}  // namespace libai::train
