// Periodic progress lines for long work (loading, training, benchmarks): done/total,
// throughput and ETA, at most one line per `period_seconds` (and always the last).
//
//   Progress progress("train", total_steps, "step");
//   for (int i = 0; i < total_steps; ++i) { ...; progress.advance(1, str_cat("loss ", loss)); }
//   // [train] 120/500 step (24.0%)  38.2 step/s  ETA 9.9s  loss 0.41
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace libai {

class Progress {
 public:
  Progress(std::string what, int64_t total, std::string unit, double period_seconds = 1.0,
           std::FILE* out = stderr);
  // Adds `n` units; prints a line when the period has passed or the work is complete.
  void advance(int64_t n = 1, const std::string& detail = "");
  int64_t done() const { return done_; }
  double elapsed_seconds() const;
  // The line that would be printed now (for tests).
  std::string line(const std::string& detail = "") const;

 private:
  std::string what_, unit_;
  int64_t total_, done_ = 0;
  double period_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_, last_print_;
};

}  // namespace libai
