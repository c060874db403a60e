// Helpers for the config tests: a scratch folder of YAML files, and catching error messages.
//
//   TempDir dir;
//   std::string path = dir.write("jobs/a.yaml", "_base_: ../common.yaml\n");
//   std::string message = error_message<InvalidArgument>([&] { Config::load(path); });
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/error.h"

namespace libai::config::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "libai_config_XXXXXX").string();
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& relative) const { return path_ + "/" + relative; }

  std::string write(const std::string& relative, const std::string& text) const {
    const std::filesystem::path target = file(relative);
    std::filesystem::create_directories(target.parent_path());
    std::ofstream(target, std::ios::binary) << text;
    return target.string();
  }

 private:
  std::string path_;
};

// The message of the ErrorType `body` throws; a test failure if it throws nothing or another type.
template <typename ErrorType, typename Body>
std::string error_message(Body&& body) {
  try {
    body();
  } catch (const ErrorType& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong error type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an error, none was thrown";
  return "";
}

}  // namespace libai::config::testing
