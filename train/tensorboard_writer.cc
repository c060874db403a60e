// TensorBoard event files (metrics.h), written without a protobuf dependency.
//
// Note [TensorBoard event files]
// An event file is a sequence of TFRecords, each
//   uint64 length, uint32 masked_crc32c(the 8 length bytes), `length` bytes of data,
//   uint32 masked_crc32c(data)                                   (all little-endian)
// whose data is one serialized tensorflow.Event message (tensorflow/core/util/event.proto):
//   double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2" (TensorBoard's loader checks it), then
// one Event per write with one simple_value per scalar. Protobuf's wire format for these few
// fields is small enough to write by hand: a key (field number << 3 | wire type) followed by
// a varint (type 0), 8 little-endian bytes (type 1), a varint length and the bytes (type 2) or
// 4 little-endian bytes (type 5). TensorBoard picks up every file whose name contains
// "tfevents" in the log directory, so a resumed run adds a new file next to the old one.
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <fstream>

#include "runtime/error.h"
#include "train/crc32c.h"
#include "train/metrics.h"

namespace libai::train {
namespace {

void put_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((value >> (8 * i)) & 0xFFu));
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(char((value & 0x7Fu) | 0x80u));
    value >>= 7;
  }
  out.push_back(char(value));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double_field(std::string& out, int field, double value) {
  put_key(out, field, 1);
  put_little_endian(out, std::bit_cast<uint64_t>(value), 8);
}

void put_float_field(std::string& out, int field, float value) {
  put_key(out, field, 5);
  put_little_endian(out, std::bit_cast<uint32_t>(value), 4);
}

void put_int64_field(std::string& out, int field, int64_t value) {
  put_key(out, field, 0);
  put_varint(out, uint64_t(value));  // int64: negatives as their two's complement, 10 bytes
}

std::string tfrecord(const std::string& data) {
  std::string record, length;
  put_little_endian(length, data.size(), 8);
  record += length;
  put_little_endian(record, masked_crc32c(length), 4);
  record += data;
  put_little_endian(record, masked_crc32c(data), 4);
  return record;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

std::string tag_of(const std::string& name) {
  return name.find('/') == std::string::npos ? "train/" + name : name;
}

class TensorBoardWriter : public MetricsWriter {
 public:
  explicit TensorBoardWriter(const std::filesystem::path& log_dir) {
    std::filesystem::create_directories(log_dir);
    const double now = unix_seconds();
    const std::string stem =
        "events.out.tfevents." + std::to_string(int64_t(now)) + "." + host_name();
    path_ = log_dir / stem;
    // Two writers started within a second in one folder (a restart) keep separate files.
    for (int i = 1; std::filesystem::exists(path_); ++i)
      path_ = log_dir / (stem + "." + std::to_string(i));
    out_.open(path_, std::ios::out | std::ios::binary);
    LIBAI_CHECK_KIND(IoError, out_.good(), "metrics: cannot create ", path_.string());
    std::string event;
    put_double_field(event, 1, now);
    put_bytes_field(event, 3, "brain.Event:2");
    append(event);
  }

  void write(const StepMetrics& m) override {
    std::string summary;
    auto add_value = [&summary](const std::string& tag, double value) {
      std::string encoded;
      put_bytes_field(encoded, 1, tag);
      put_float_field(encoded, 2, float(value));
      put_bytes_field(summary, 1, encoded);
    };
    if (m.loss) add_value("train/loss", *m.loss);
    for (const auto& [name, value] : m.scalars) add_value(tag_of(name), value);
    std::string event;
    put_double_field(event, 1, unix_seconds());
    put_int64_field(event, 2, m.iteration);
    put_bytes_field(event, 5, summary);
    append(event);
  }

  void close() override {
    if (out_.is_open()) out_.close();
  }

 private:
  void append(const std::string& event) {
    out_ << tfrecord(event);
    out_.flush();  // TensorBoard reloads the file while the run goes on
    LIBAI_CHECK_KIND(IoError, out_.good(), "metrics: writing ", path_.string(), " failed");
  }

  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace

std::unique_ptr<MetricsWriter> make_tensorboard_writer(const std::filesystem::path& log_dir) {
  return std::make_unique<TensorBoardWriter>(log_dir);
}

}  // namespace libai::train
