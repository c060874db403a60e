// What one named logger (runtime/logging.h) writes while an object of CapturedLog lives, for
// tests that check a warning names what it should:
//
//   CapturedLog log("comm");
//   ...
//   const std::string written = log.wait_for("dropping the connection", 10s);
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/logging.h"

namespace libai::testing {

// Keeps every line a logger writes.
class LineSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string text() {
    std::lock_guard lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    text_.append(formatted.data(), formatted.size());
  }
  void flush_() override {}

 private:
  std::string text_;
};

class CapturedLog {
 public:
  explicit CapturedLog(std::string name) : name_(std::move(name)) {
    logger(name_)->sinks().push_back(sink_);
  }
  ~CapturedLog() {
    auto& sinks = logger(name_)->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  // Waits (up to `timeout`) for a line holding `text`; returns everything written so far.
  std::string wait_for(const std::string& text, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const std::string all = sink_->text();
      if (all.find(text) != std::string::npos || std::chrono::steady_clock::now() > deadline)
        return all;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  std::string name_;
  std::shared_ptr<LineSink> sink_ = std::make_shared<LineSink>();
};

}  // namespace libai::testing
