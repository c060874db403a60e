#include "service/http_metrics.h"

#include <cstdio>

namespace libai::http {
namespace {

std::string number(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", x);
  return buffer;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number(value) + "\n";
}

}  // namespace

void Histogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++counts_[i];
  sum_ += seconds;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name,
                       const std::string& labels) const {
  const std::string prefix = labels.empty() ? "" : labels + ",";
  int64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts_[i];
    sample(out, name + "_bucket", prefix + "le=\"" + number(kBounds[i]) + "\"", double(cumulative));
  }
  sample(out, name + "_bucket", prefix + "le=\"+Inf\"", double(count_));
  sample(out, name + "_sum", labels, sum_);
  sample(out, name + "_count", labels, double(count_));
}

void HttpMetrics::record_request(const std::string& endpoint, int status, double seconds) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
  latency_[endpoint].observe(seconds);
}

void HttpMetrics::record_time_to_first_token(const std::string& endpoint, double seconds) {
  std::lock_guard lock(mutex_);
  first_token_[endpoint].observe(seconds);
}

std::string HttpMetrics::render(const ServiceMetrics& service) const {
  std::string out;
  {
    std::lock_guard lock(mutex_);
    header(out, "libai_http_requests_total", "counter", "HTTP requests answered, by endpoint and status");
    for (const auto& [key, count] : requests_)
      sample(out, "libai_http_requests_total",
             "endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"",
             double(count));
    header(out, "libai_http_request_duration_seconds", "histogram",
           "time from a request's first byte to its last response byte");
    for (const auto& [endpoint, histogram] : latency_)
      histogram.render(out, "libai_http_request_duration_seconds", "endpoint=\"" + endpoint + "\"");
    header(out, "libai_http_time_to_first_token_seconds", "histogram",
           "streamed requests: time from the request to its first token");
    for (const auto& [endpoint, histogram] : first_token_)
      histogram.render(out, "libai_http_time_to_first_token_seconds",
                       "endpoint=\"" + endpoint + "\"");
  }
  header(out, "libai_http_client_disconnects_total", "counter",
         "requests whose client went away before the answer; each one cancelled");
  sample(out, "libai_http_client_disconnects_total", "", double(disconnects_.load()));
  header(out, "libai_http_oversized_requests_total", "counter",
         "requests refused for their size (413) without reading their body");
  sample(out, "libai_http_oversized_requests_total", "", double(oversized_.load()));
  header(out, "libai_http_active_streams", "gauge", "server-sent event streams open now");
  sample(out, "libai_http_active_streams", "", double(active_streams_.load()));

  header(out, "libai_requests_total", "counter", "service requests finished, by outcome");
  sample(out, "libai_requests_total", "outcome=\"ok\"",
         double(service.requests - service.failed - service.cancelled));
  sample(out, "libai_requests_total", "outcome=\"failed\"", double(service.failed));
  sample(out, "libai_requests_total", "outcome=\"cancelled\"", double(service.cancelled));
  header(out, "libai_prompt_tokens_total", "counter", "prompt tokens of finished requests");
  sample(out, "libai_prompt_tokens_total", "", double(service.prompt_tokens));
  header(out, "libai_completion_tokens_total", "counter", "tokens generated");
  sample(out, "libai_completion_tokens_total", "", double(service.completion_tokens));
  header(out, "libai_queue_depth", "gauge", "requests waiting for a slot");
  sample(out, "libai_queue_depth", "", double(service.queue_depth));
  header(out, "libai_running_batch_size", "gauge", "sequences in the running batch");
  sample(out, "libai_running_batch_size", "", double(service.running));
  header(out, "libai_decode_steps_total", "counter", "decoding steps of the engine");
  sample(out, "libai_decode_steps_total", "", double(service.decode_steps));
  header(out, "libai_batched_rows_total", "counter",
         "sum over decoding steps of the sequences in the step (mean batch: this / steps)");
  sample(out, "libai_batched_rows_total", "", double(service.batched_rows));
  return out;
}

}  // namespace libai::http
