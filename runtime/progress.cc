#include "runtime/progress.h"

namespace libai {

Progress::Progress(std::string what, int64_t total, std::string unit, double period_seconds,
                   std::FILE* out)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      period_(period_seconds),
      out_(out),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::line(const std::string& detail) const {
  double elapsed = elapsed_seconds();
  double rate = elapsed > 0 ? double(done_) / elapsed : 0.0;
  char buf[256];
  if (total_ > 0) {
    double eta = rate > 0 ? double(total_ - done_) / rate : 0.0;
    std::snprintf(buf, sizeof buf, "[%s] %lld/%lld %s (%.1f%%)  %.1f %s/s  ETA %.1fs",
                  what_.c_str(), (long long)done_, (long long)total_, unit_.c_str(),
                  100.0 * double(done_) / double(total_), rate, unit_.c_str(), eta);
  } else {
    std::snprintf(buf, sizeof buf, "[%s] %lld %s  %.1f %s/s", what_.c_str(), (long long)done_,
                  unit_.c_str(), rate, unit_.c_str());
  }
  std::string s = buf;
  if (!detail.empty()) s += "  " + detail;
  return s;
}

void Progress::advance(int64_t n, const std::string& detail) {
  done_ += n;
  auto now = std::chrono::steady_clock::now();
  bool finished = total_ > 0 && done_ >= total_;
  if (finished || std::chrono::duration<double>(now - last_print_).count() >= period_) {
    last_print_ = now;
    std::fprintf(out_, "%s\n", line(detail).c_str());
    std::fflush(out_);
  }
}

}  // namespace libai
