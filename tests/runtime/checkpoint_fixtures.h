// Shared helpers of the checkpoint tests: the committed fixtures (tools/
// make_checkpoint_fixtures.py), their expected.json, a scratch folder, byte-level file edits.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace libai::checkpoint::testing {

namespace fs = std::filesystem;

inline fs::path fixture_dir() { return fs::path(LIBAI_SOURCE_DIR) / "tests/data/checkpoint"; }
inline std::string fixture(const std::string& name) { return (fixture_dir() / name).string(); }

inline const nlohmann::json& expected() {
  static const nlohmann::json value = [] {
    std::ifstream in(fixture("expected.json"));
    return nlohmann::json::parse(in);
  }();
  return value;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A fresh folder per test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("libai_ckpt_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs `fn`, expects an Error of type E whose message contains every piece.
template <typename E, typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> pieces) {
  try {
    fn();
    ADD_FAILURE() << "no error was raised";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const auto& piece : pieces) {
      EXPECT_NE(message.find(piece), std::string::npos)
          << "message lacks '" << piece << "': " << message;
    }
  } catch (const Error& e) {
    ADD_FAILURE() << "wrong error kind " << error_kind_name(e.kind()) << ": " << e.what();
  }
}

// Compares a tensor with an expected.json entry: dtype, shape and values (exact: every
// fixture value is representable in f64).
inline void expect_matches(const Tensor& t, const nlohmann::json& want, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(dtype_name(t.dtype()), want["dtype"].get<std::string>());
  EXPECT_EQ(t.shape(), want["shape"].get<Shape>());
  EXPECT_EQ(t.to_vector<double>(), want["values"].get<std::vector<double>>());
}

}  // namespace libai::checkpoint::testing
