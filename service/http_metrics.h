// What GET /metrics reports, in Prometheus' text format (version 0.0.4): the server's own
// counters and histograms plus the service's (docs/SERVER.md lists every name).
//
//   HttpMetrics m;
//   m.record_request("/v1/completions", 200, 0.12);
//   std::string text = m.render(service.metrics());
//
// Thread-safe: every worker thread records into one instance.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "service/service.h"

namespace libai::http {

// A Prometheus histogram: cumulative bucket counts, a sum and a count.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                    1,     2.5,  5,     10,   30,  60,  120};
  void observe(double seconds);
  // Lines `name_bucket{labels,le="..."} n`, `name_sum{labels}`, `name_count{labels}`.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::array<int64_t, kBounds.size() + 1> counts_{};  // the last one: above every bound
  double sum_ = 0;
  int64_t count_ = 0;
};

class HttpMetrics {
 public:
  // `endpoint` is one of the served paths or "other" (bounded label values).
  void record_request(const std::string& endpoint, int status, double seconds);
  void record_time_to_first_token(const std::string& endpoint, double seconds);
  void record_disconnect() { disconnects_.fetch_add(1); }
  void record_oversized() { oversized_.fetch_add(1); }
  std::atomic<int64_t>& active_streams() { return active_streams_; }

  std::string render(const ServiceMetrics& service) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (endpoint, status) -> count
  std::map<std::string, Histogram> latency_;                 // endpoint -> seconds
  std::map<std::string, Histogram> first_token_;             // endpoint -> seconds (streams)
  std::atomic<int64_t> disconnects_{0}, oversized_{0}, active_streams_{0};
};

}  // namespace libai::http
