// A bounded load test of an OpenAI-style completions server (ours, `libai-actor serve`, or a
// peer speaking the same API subset): N client threads each send a fixed number of
// /v1/completions requests one after another, and one JSON line reports what they saw.
//
//   bench_serve_load --port 8000 --clients 8 --requests 2 --max-tokens 32 [--stream]
//
// Every request is the same work whatever the server: a prompt of token ids drawn from a seeded
// generator (no tokenizer differences), greedy decoding, and `min_tokens` = `max_tokens` so that
// no request ends early on an end-of-sequence token (Note [Equal work per request]). The report:
// requests answered, errors (with the first few messages), completion tokens, wall time,
// tokens/s, latency p50/p90/p99 and, with --stream, time to the first event p50/p99. A progress
// line on stderr once a second gives the throughput so far and the time left.
//
// Note [Equal work per request]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A load test compares servers by tokens per second, which only means something when every
// request asks for the same tokens. Random weights make an end-of-sequence token likely early,
// so each request sets `min_tokens` (vLLM's extension, which our server and bench/peer_serve.py
// honour) to max_tokens, and the client checks the answer's usage: a request that made fewer
// completion tokens is counted in `short_requests`, and a run with any is not a fair row.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  int clients = 1;
  int requests = 4;      // per client
  int max_tokens = 32;
  int prompt_tokens = 16;
  int vocab = 500;       // prompt ids are drawn from [first_id, vocab)
  int first_id = 5;      // skip the special tokens of the fixture tokenizers
  unsigned seed = 0;
  int warmup = 1;        // untimed requests sent one by one before the clients start
  int timeout_s = 600;   // per request (connect and each read)
  bool stream = false;
  std::string model;     // sent as `model` when given
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "bench_serve_load: %s\n", message.c_str());
  std::fprintf(stderr,
               "usage: bench_serve_load --port N [--host H] [--clients N] [--requests N per "
               "client] [--max-tokens N] [--prompt-tokens N] [--vocab N] [--seed N] [--warmup N] "
               "[--timeout-s N] [--model NAME] [--stream]\n");
  std::exit(2);
}

int int_arg(const std::string& flag, const char* value, int low) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < low || v > 1000000)
    usage_error(flag + " wants an integer >= " + std::to_string(low) + ", got '" + value + "'");
  return int(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--host") o.host = value();
    else if (a == "--port") o.port = int_arg(a, value(), 1);
    else if (a == "--clients") o.clients = int_arg(a, value(), 1);
    else if (a == "--requests") o.requests = int_arg(a, value(), 1);
    else if (a == "--max-tokens") o.max_tokens = int_arg(a, value(), 1);
    else if (a == "--prompt-tokens") o.prompt_tokens = int_arg(a, value(), 1);
    else if (a == "--vocab") o.vocab = int_arg(a, value(), 2);
    else if (a == "--seed") o.seed = unsigned(int_arg(a, value(), 0));
    else if (a == "--warmup") o.warmup = int_arg(a, value(), 0);
    else if (a == "--timeout-s") o.timeout_s = int_arg(a, value(), 1);
    else if (a == "--model") o.model = value();
    else if (a == "--stream") o.stream = true;
    else usage_error("unknown argument '" + a + "'");
  }
  if (o.port == 0) usage_error("give --port");
  if (o.first_id >= o.vocab) o.first_id = 0;
  return o;
}

// The prompts, one per request of the whole run, the same for the same seed.
std::vector<std::vector<int>> make_prompts(const Options& o) {
  std::mt19937 rng(o.seed);
  std::uniform_int_distribution<int> id(o.first_id, o.vocab - 1);
  std::vector<std::vector<int>> prompts(size_t(o.clients) * o.requests + o.warmup);
  for (auto& p : prompts) {
    p.resize(size_t(o.prompt_tokens));
    for (int& t : p) t = id(rng);
  }
  return prompts;
}

struct Outcome {
  bool ok = false;
  std::string error;
  double latency_ms = 0;
  double ttft_ms = -1;
  int completion_tokens = 0;
};

// The usage of a streamed answer: the `usage` of its last event that has one.
int streamed_usage(const std::string& body, std::string& error) {
  int tokens = -1;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string payload = body.substr(at + 6, end == std::string::npos ? end : end - at - 6);
    at = end == std::string::npos ? body.size() : end + 2;
    if (payload == "[DONE]") continue;
    const json event = json::parse(payload, nullptr, false);
    if (event.is_discarded()) continue;
    if (event.contains("error")) error = event["error"].dump();
    if (event.contains("usage") && event["usage"].is_object())
      tokens = event["usage"].value("completion_tokens", -1);
  }
  return tokens;
}

Outcome one_request(httplib::Client& client, const Options& o, const std::vector<int>& prompt) {
  json body = {{"prompt", prompt}, {"max_tokens", o.max_tokens}, {"min_tokens", o.max_tokens},
               {"temperature", 0}};
  if (!o.model.empty()) body["model"] = o.model;
  if (o.stream) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
  }
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string received;
  Outcome out;
  const auto start = Clock::now();
  // A content receiver sees each chunk as it arrives: the first one is the first event.
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (out.ttft_ms < 0)
      out.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    received.append(data, n);
    return true;
  };
  auto res = client.send(req);
  out.latency_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!res) {
    out.error = "POST http://" + o.host + ":" + std::to_string(o.port) +
                "/v1/completions: no answer (" + httplib::to_string(res.error()) + ")";
    return out;
  }
  if (res->status != 200) {
    out.error = "status " + std::to_string(res->status) + ": " + received.substr(0, 200);
    return out;
  }
  if (o.stream) {
    out.completion_tokens = streamed_usage(received, out.error);
    if (!out.error.empty()) return out;
  } else {
    const json answer = json::parse(received, nullptr, false);
    if (!answer.is_discarded() && answer.contains("usage"))
      out.completion_tokens = answer["usage"].value("completion_tokens", -1);
  }
  if (out.completion_tokens < 0) {
    out.error = "no usage.completion_tokens in the answer: " + received.substr(0, 200);
    return out;
  }
  out.ok = true;
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest value with at least p of the values at or below it.
  size_t rank = size_t(std::ceil(p * double(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

httplib::Client make_client(const Options& o) {
  httplib::Client client(o.host, o.port);
  client.set_connection_timeout(o.timeout_s, 0);
  client.set_read_timeout(o.timeout_s, 0);
  client.set_write_timeout(o.timeout_s, 0);
  client.set_keep_alive(true);
  return client;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const auto prompts = make_prompts(o);
  const size_t total = size_t(o.clients) * o.requests;

  // Warm-up: one by one, untimed; a server that does not answer stops the run here.
  {
    auto client = make_client(o);
    for (int i = 0; i < o.warmup; ++i) {
      const Outcome w = one_request(client, o, prompts[total + size_t(i)]);
      if (!w.ok) {
        std::fprintf(stderr, "bench_serve_load: warm-up request failed: %s\n", w.error.c_str());
        return 1;
      }
    }
  }

  std::vector<Outcome> outcomes(total);
  std::atomic<size_t> done{0};
  std::atomic<long> tokens_done{0};
  std::mutex mutex;
  std::condition_variable finished;
  bool all_done = false;

  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < o.clients; ++c) {
    clients.emplace_back([&, c] {
      auto client = make_client(o);
      for (int r = 0; r < o.requests; ++r) {
        const size_t index = size_t(c) * o.requests + r;
        outcomes[index] = one_request(client, o, prompts[index]);
        tokens_done += std::max(0, outcomes[index].completion_tokens);
        ++done;
      }
    });
  }
  // Progress once a second; each wait is bounded, and the clients' own timeouts bound the run.
  std::thread progress([&] {
    std::unique_lock lock(mutex);
    bool printed = false;
    while (!finished.wait_for(lock, std::chrono::seconds(1), [&] { return all_done; })) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const size_t d = done.load();
      const double eta = d ? elapsed * double(total - d) / double(d) : -1;
      std::fprintf(stderr, "\r[serve_load] %zu/%zu requests, %.1f tokens/s, %.0f s, ETA %s   ", d,
                   total, double(tokens_done.load()) / elapsed, elapsed,
                   d ? (std::to_string(int(eta + 0.5)) + " s").c_str() : "?");
      printed = true;
    }
    if (printed) std::fprintf(stderr, "\n");
  });
  for (auto& t : clients) t.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  {
    std::lock_guard lock(mutex);
    all_done = true;
  }
  finished.notify_all();
  progress.join();

  std::vector<double> latency, ttft;
  long tokens = 0;
  int errors = 0, short_requests = 0;
  json error_samples = json::array();
  for (const auto& r : outcomes) {
    if (!r.ok) {
      ++errors;
      if (error_samples.size() < 3) error_samples.push_back(r.error);
      continue;
    }
    latency.push_back(r.latency_ms);
    if (o.stream && r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
    tokens += r.completion_tokens;
    if (r.completion_tokens < o.max_tokens) ++short_requests;
  }
  json report = {
      {"clients", o.clients},
      {"requests_per_client", o.requests},
      {"max_tokens", o.max_tokens},
      {"prompt_tokens", o.prompt_tokens},
      {"stream", o.stream},
      {"requests", latency.size()},
      {"errors", errors},
      {"error_samples", error_samples},
      {"short_requests", short_requests},
      {"tokens", tokens},
      {"wall_s", wall_s},
      {"tokens_per_s", double(tokens) / wall_s},
      {"requests_per_s", double(latency.size()) / wall_s},
      {"latency_ms",
       {{"p50", percentile(latency, 0.5)},
        {"p90", percentile(latency, 0.9)},
        {"p99", percentile(latency, 0.99)}}},
  };
  if (o.stream)
    report["ttft_ms"] = {{"p50", percentile(ttft, 0.5)}, {"p99", percentile(ttft, 0.99)}};
  std::printf("%s\n", report.dump().c_str());
  return errors ? 1 : 0;
}
