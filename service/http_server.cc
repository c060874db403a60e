#include "service/http_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "runtime/error.h"
#include "runtime/logging.h"
#include "service/http_metrics.h"
#include "service/http_transport.h"
#include "service/openai_api.h"

namespace libai {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using http::ApiError;
using http::json;

const char* kJson = "application/json";
// Texts in answers may hold bytes that are not UTF-8 (a request's own strings echoed in an
// error, a model's bytes): dumped as U+FFFD instead of throwing mid-answer.
constexpr auto kReplaceBadUtf8 = json::error_handler_t::replace;

std::string endpoint_label(const std::string& path) {
  static const char* known[] = {"/v1/completions", "/v1/chat/completions", "/v1/embeddings",
                                "/v1/models",      "/health",              "/metrics"};
  for (const char* k : known)
    if (path == k) return k;
  return "other";
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(http::error_body(error).dump(-1, ' ', false, kReplaceBadUtf8), kJson);
}

json parse_json_body(const httplib::Request& req) {
  try {
    return json::parse(req.body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
}

// Note [Streamed generation]
// A streamed request runs in the service like any other; its on_token callback (on the
// engine's thread) only appends the new text to `pending` and wakes the HTTP worker, so a slow
// client never slows the batch. The worker sends what arrived as one event, minus the tail a
// stop string may still claim (Note [Holding back stop strings] in openai_api.cc), and checks
// between events whether the client is gone: then it cancels the request, whose slot the
// engine frees before its next step. The answer's status is chosen before the first event: the
// worker waits for the first token or the end, so a request the service refuses (a prompt too
// long, say) gets a 4xx like an unstreamed one.
struct Stream {
  std::mutex mutex;
  std::condition_variable wake;
  std::string pending;  // arrived, not yet taken by the worker
  int64_t tokens = 0;
  bool consumer_gone = false;

  std::shared_future<GenerateResult> future;  // shared: the status check and the end both read it
  CancelToken cancel;
  std::vector<std::string> stops;
  int max_new_tokens = 0;

  // The worker's side.
  std::string text;  // taken so far
  size_t sent = 0;   // bytes of `text` sent
  bool first = true;
  Clock::time_point start;

  ~Stream() {
    // However the worker left (client gone, server stopping, an exception), nobody reads on.
    if (future.valid() && future.wait_for(0s) != std::future_status::ready) cancel.cancel();
  }

  bool finished() { return future.wait_for(0s) == std::future_status::ready; }

  // Waits for new text or the end, at most `slice`; returns the text taken.
  std::string take(std::chrono::milliseconds slice) {
    std::unique_lock lock(mutex);
    // The last token of a length-limited request is followed at once by the end: wait for it
    // rather than poll.
    if (pending.empty() && tokens >= max_new_tokens && max_new_tokens > 0) {
      lock.unlock();
      future.wait_for(slice);
      lock.lock();
    } else if (pending.empty()) {
      wake.wait_for(lock, slice, [&] { return !pending.empty(); });
    }
    return std::exchange(pending, {});
  }
};

}  // namespace

struct HttpServer::Impl {
  Impl(Service& service, HttpServerOptions options)
      : service(service),
        options(std::move(options)),
        info(service.info()),
        server(limits_of(this->options)),
        log(logger("http")) {
    api.model_name = this->options.model_name;
    if (api.model_name.empty()) {
      auto folder = this->options.model_dir;
      if (folder.filename().empty()) folder = folder.parent_path();
      api.model_name = folder.filename().string();
    }
    if (api.model_name.empty()) api.model_name = info.model_type;
    api.max_positions = info.max_positions;
    created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
    std::random_device device;
    seeds.seed((uint64_t(device()) << 32) | device());
    id_prefix = std::to_string(seeds() % 1000000);
    routes();
  }

  static http::ConnectionLimits limits_of(const HttpServerOptions& o) {
    http::ConnectionLimits limits;
    limits.max_body_bytes = o.max_body_bytes;
    limits.read_timeout = o.read_timeout;
    limits.write_timeout = o.write_timeout;
    limits.keep_alive = o.keep_alive;
    return limits;
  }

  std::string next_id(const char* kind) {
    return std::string(kind) + "-" + id_prefix + "-" + std::to_string(++requests);
  }

  uint64_t draw_seed() {
    std::lock_guard lock(seed_mutex);
    return seeds();
  }

  // Runs `handler`, turning any exception into the JSON error it answers.
  template <typename Handler>
  httplib::Server::Handler guarded(Handler handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      try {
        (this->*handler)(req, res);
      } catch (const std::exception& e) {
        send_error(res, http::api_error_from(e));
      }
    };
  }

  void routes() {
    server.Post("/v1/completions", guarded(&Impl::completions));
    server.Post("/v1/chat/completions", guarded(&Impl::chat_completions));
    server.Post("/v1/embeddings", guarded(&Impl::embeddings));
    server.Get("/v1/models", guarded(&Impl::models));
    server.Get("/health", guarded(&Impl::health));
    server.Get("/metrics", guarded(&Impl::prometheus));

    // Note [Bounded connections] in http_transport.cc: a body we will not read is refused
    // before routing, and its connection closed after the answer.
    server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      auto& exchange = http::current_exchange();
      if (req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos) {
        exchange.close_after = true;
        res.set_header("Connection", "close");
        send_error(res, ApiError(411, "chunked request bodies are not accepted: send Content-Length"));
        return httplib::Server::HandlerResponse::Handled;
      }
      const std::string length = req.get_header_value("Content-Length");
      if (!length.empty() && std::strtoull(length.c_str(), nullptr, 10) > options.max_body_bytes) {
        exchange.close_after = true;
        metrics.record_oversized();
        res.set_header("Connection", "close");
        send_error(res, ApiError(413,
                                 str_cat("the request body is ", length, " bytes, more than the ",
                                         options.max_body_bytes, " this server accepts")));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // Errors cpp-httplib answers itself (no route, a request it cannot parse) get JSON too.
    server.set_error_handler(httplib::Server::HandlerWithResponse(
        [](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
      std::string message = "HTTP error " + std::to_string(res.status);
      if (res.status == 400) message = "malformed HTTP request";
      if (res.status == 404) message = "no such endpoint (see docs/SERVER.md)";
      if (res.status == 414) message = "the request line is too long";
      send_error(res, ApiError(res.status, message));
      return httplib::Server::HandlerResponse::Handled;
    }));
    server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      auto& exchange = http::current_exchange();
      const double seconds = std::chrono::duration<double>(Clock::now() - exchange.start).count();
      metrics.record_request(endpoint_label(req.path), res.status, seconds);
      std::string extra;
      if (exchange.prompt_tokens >= 0)
        extra += str_cat(" tokens ", exchange.prompt_tokens, "+", exchange.completion_tokens);
      if (*exchange.finish) extra += str_cat(" ", exchange.finish);
      if (exchange.client_gone) extra += " client gone: cancelled";
      log->info("{} {} {} {} {:.1f} ms{}", req.remote_addr.empty() ? "-" : req.remote_addr,
                req.method.empty() ? "-" : req.method, req.path.empty() ? "-" : req.path,
                res.status, seconds * 1e3, extra);
    });
  }

  void require(bool can, const char* what) {
    if (!can)
      throw ApiError(400, str_cat("the model '", api.model_name, "' (", info.model_type, ", ",
                                  info.task, ") cannot ", what),
                     "model");
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    generate(req, res, false);
  }
  void chat_completions(const httplib::Request& req, httplib::Response& res) {
    generate(req, res, true);
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    http::CompletionRequest request = http::parse_completion(parse_json_body(req), api, chat);
    require(info.can_generate, "generate text");
    if (!request.has_seed) request.generate.seed = draw_seed();
    const std::string id = next_id(chat ? "chatcmpl" : "cmpl");
    if (request.stream) return stream(request, id, res);

    CancelToken cancel = request.generate.cancel;
    std::future<GenerateResult> future = service.submit(request.generate);
    // A client that leaves while its answer is computed cancels it (its slot is freed).
    auto& exchange = http::current_exchange();
    while (future.wait_for(50ms) != std::future_status::ready) {
      if (!exchange.client_gone && (server.stopping() || http::peer_gone(exchange.socket))) {
        exchange.client_gone = !server.stopping();
        if (exchange.client_gone) metrics.record_disconnect();
        cancel.cancel();
      }
    }
    const GenerateResult result = future.get();
    exchange.prompt_tokens = result.prompt_tokens;
    exchange.completion_tokens = result.completion_tokens;
    exchange.finish = to_string(result.finish_reason);
    res.set_content(http::completion_response(request, api, result, id, created).dump(-1, ' ', false, kReplaceBadUtf8), kJson);
  }

  void stream(const http::CompletionRequest& request, const std::string& id,
              httplib::Response& res) {
    auto state = std::make_shared<Stream>();
    state->stops = request.generate.stop;
    state->max_new_tokens = request.generate.max_new_tokens;
    state->cancel = request.generate.cancel;
    state->start = Clock::now();
    GenerateRequest generate = request.generate;
    std::weak_ptr<Stream> weak = state;
    generate.on_token = [weak](const TokenEvent& event) {
      auto s = weak.lock();
      if (!s) return false;
      std::lock_guard lock(s->mutex);
      if (s->consumer_gone) return false;
      s->pending += event.text;
      ++s->tokens;
      s->wake.notify_one();
      return true;
    };
    state->future = service.submit(std::move(generate)).share();

    // The status is decided before the first event (Note [Streamed generation]).
    auto& exchange = http::current_exchange();
    for (;;) {
      {
        std::unique_lock lock(state->mutex);
        state->wake.wait_for(lock, 5ms, [&] { return state->tokens > 0; });
        if (state->tokens > 0) break;
      }
      if (state->finished()) {
        state->future.get();  // an error is answered as such; else a stream without text follows
        break;
      }
      if (server.stopping() || http::peer_gone(exchange.socket)) {
        exchange.client_gone = !server.stopping();
        if (exchange.client_gone) metrics.record_disconnect();
        state->cancel.cancel();
        throw ApiError(503, "the client left or the server is stopping");
      }
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    ++metrics.active_streams();
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, state, request, id](size_t, httplib::DataSink& sink) {
          return stream_step(*state, request, id, sink);
        },
        [this, state](bool) {
          --metrics.active_streams();
          std::lock_guard lock(state->mutex);
          state->consumer_gone = true;
        });
  }

  bool send_event(httplib::DataSink& sink, const std::string& data) {
    const std::string event = "data: " + data + "\n\n";
    return sink.write(event.data(), event.size());
  }

  // One call of the content provider: sends what arrived; false ends the stream unfinished.
  bool stream_step(Stream& s, const http::CompletionRequest& request, const std::string& id,
                   httplib::DataSink& sink) {
    auto& exchange = http::current_exchange();
    for (;;) {
      if (server.stopping() || http::peer_gone(exchange.socket)) {
        exchange.client_gone = !server.stopping();
        if (exchange.client_gone) metrics.record_disconnect();
        s.cancel.cancel();
        return false;
      }
      const bool done = s.finished();  // before taking: then every token's text is in pending
      s.text += s.take(done ? 0ms : 2ms);
      const size_t sendable = http::sendable_length(s.text, s.stops);
      if (sendable > s.sent) {
        if (s.first)
          metrics.record_time_to_first_token(request.chat ? "/v1/chat/completions" : "/v1/completions",
                                             std::chrono::duration<double>(Clock::now() - s.start).count());
        const json chunk = http::completion_chunk(request, api, s.text.substr(s.sent, sendable - s.sent),
                                                  "", id, created, s.first);
        s.first = false;
        s.sent = sendable;
        if (!send_event(sink, chunk.dump(-1, ' ', false, kReplaceBadUtf8))) return lost(s);
        if (!done) return true;
      }
      if (done) return finish_stream(s, request, id, sink);
    }
  }

  bool lost(Stream& s) {
    auto& exchange = http::current_exchange();
    exchange.client_gone = true;
    metrics.record_disconnect();
    s.cancel.cancel();
    return false;
  }

  bool finish_stream(Stream& s, const http::CompletionRequest& request, const std::string& id,
                     httplib::DataSink& sink) {
    auto& exchange = http::current_exchange();
    GenerateResult result;
    try {
      result = s.future.get();
    } catch (const std::exception& e) {
      // Headers are out: the error travels as an event (OpenAI's streams do the same).
      const ApiError error = http::api_error_from(e);
      if (!send_event(sink, http::error_body(error).dump(-1, ' ', false, kReplaceBadUtf8)) || !send_event(sink, "[DONE]"))
        return lost(s);
      sink.done();
      return true;
    }
    exchange.prompt_tokens = result.prompt_tokens;
    exchange.completion_tokens = result.completion_tokens;
    exchange.finish = to_string(result.finish_reason);
    std::string rest;
    if (result.text.compare(0, s.sent, s.text, 0, s.sent) == 0) {
      rest = result.text.substr(std::min(s.sent, result.text.size()));
    } else {
      log->warn("{}: the streamed text is not a prefix of the result's text", id);
    }
    const std::string reason = http::finish_reason_name(result.finish_reason);
    if (request.chat && !rest.empty()) {
      if (!send_event(sink, http::completion_chunk(request, api, rest, "", id, created, s.first).dump(-1, ' ', false, kReplaceBadUtf8)))
        return lost(s);
      s.first = false;
      rest.clear();
    }
    if (!send_event(sink, http::completion_chunk(request, api, rest, reason, id, created, s.first).dump(-1, ' ', false, kReplaceBadUtf8)))
      return lost(s);
    if (request.include_usage) {
      json usage = http::completion_chunk(request, api, "", "", id, created, false);
      usage["choices"] = json::array();
      usage["usage"] = http::usage_json(result);
      if (!send_event(sink, usage.dump(-1, ' ', false, kReplaceBadUtf8))) return lost(s);
    }
    if (!send_event(sink, "[DONE]")) return lost(s);
    sink.done();
    return true;
  }

  void embeddings(const httplib::Request& req, httplib::Response& res) {
    const http::EmbeddingRequest request = http::parse_embeddings(parse_json_body(req), api);
    require(info.can_embed, "embed text");
    const auto vectors = service.embed(request.texts);
    int64_t tokens = 0;
    for (const auto& text : request.texts) tokens += service.count_tokens(text);
    http::current_exchange().prompt_tokens = tokens;
    http::current_exchange().completion_tokens = 0;
    res.set_content(http::embeddings_response(vectors, api, tokens).dump(-1, ' ', false, kReplaceBadUtf8), kJson);
  }

  void models(const httplib::Request&, httplib::Response& res) {
    res.set_content(http::models_response(api, created).dump(-1, ' ', false, kReplaceBadUtf8), kJson);
  }

  void health(const httplib::Request&, httplib::Response& res) {
    if (server.stopping()) throw ApiError(503, "stopping", "", "server_error");
    if (const std::string failure = service.failure(); !failure.empty())
      throw ApiError(503, failure, "", "server_error");
    res.set_content(json{{"status", "ok"}, {"model", api.model_name}}.dump(-1, ' ', false, kReplaceBadUtf8), kJson);
  }

  void prometheus(const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(service.metrics()), "text/plain; version=0.0.4");
  }

  Service& service;
  HttpServerOptions options;
  ServiceInfo info;
  http::ApiContext api;
  http::BoundedServer server;
  http::HttpMetrics metrics;
  std::shared_ptr<spdlog::logger> log;
  int64_t created = 0;
  std::string id_prefix;
  std::atomic<uint64_t> requests{0};
  std::mutex seed_mutex;
  std::mt19937_64 seeds;
  std::thread listener;
  int port = -1;
  bool started = false;
};

HttpServer::HttpServer(Service& service, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(service, std::move(options))) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  Impl& s = *impl_;
  LIBAI_CHECK(!s.started, "HttpServer::start: already started");
  const int threads =
      s.options.http_threads > 0 ? s.options.http_threads : 2 * std::max(1, s.options.max_batch) + 8;
  s.server.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  if (s.options.port == 0) {
    s.port = s.server.bind_to_any_port(s.options.host);
  } else {
    s.port = s.server.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1;
  }
  LIBAI_CHECK_KIND(IoError, s.port > 0, "serve: cannot listen on ", s.options.host, ":",
                   s.options.port, " (the port is taken, or the host is not an address of this machine)");
  s.server.widen_backlog();
  s.started = true;
  s.listener = std::thread([&s] { s.server.listen_after_bind(); });
  // stop() only reaches a server that runs: wait for the accept loop (it starts at once).
  const auto deadline = Clock::now() + 10s;
  while (!s.server.is_running() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  LIBAI_CHECK_KIND(InternalError, s.server.is_running(), "serve: the accept loop did not start");
  s.log->info("serving {} on http://{}:{} ({} connection threads)", s.api.model_name,
              s.options.host, s.port, threads);
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.started) return;
  s.started = false;
  s.server.begin_stopping();
  s.server.stop();
  if (s.listener.joinable()) s.listener.join();
}

int HttpServer::port() const { return impl_->port; }
const std::string& HttpServer::model_name() const { return impl_->api.model_name; }

}  // namespace libai
