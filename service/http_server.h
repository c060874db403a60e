// An HTTP server with an OpenAI-style API in front of a libai::Service (docs/SERVER.md):
// /v1/completions and /v1/chat/completions (server-sent events when streamed), /v1/embeddings,
// /v1/models, /health and Prometheus' /metrics. `libai-actor serve` is this class and a signal
// handler.
//
//   auto svc = libai::Service::open({.model_dir = "gpt2/"});
//   libai::HttpServer server(*svc, {.model_dir = "gpt2/", .port = 0});
//   server.start();                        // binds, then serves on its own threads
//   int port = server.port();              // the port chosen for port 0
//   ...
//   server.stop();                         // stops accepting, cancels open streams, joins
//
// Every request is answered by a worker thread of the server's pool; generation and embedding
// happen in the service, which batches the requests of all workers together. A client that goes
// away cancels its request; a slow or oversized one is cut off (Note [Bounded connections] in
// service/http_transport.cc) without holding up the others.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

#include "service/service.h"

namespace libai {

struct HttpServerOptions {
  // The model folder the service loaded: its name is the served model name (unless
  // model_name is set). Usage counts come from the service (Service::count_tokens).
  std::filesystem::path model_dir;
  std::string model_name;  // the name /v1/models lists and `model` must match; default: folder name
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0: any free port (port() says which)
  int http_threads = 0;                // connections served at once; 0: 2 * max_batch + 8
  int max_batch = 16;                  // the service's, for the default above
  size_t max_body_bytes = 1 << 20;     // larger bodies: 413, unread
  std::chrono::milliseconds read_timeout{10000};   // a request must arrive whole within this
  std::chrono::milliseconds write_timeout{10000};  // a client that reads nothing for this long is dropped
  std::chrono::milliseconds keep_alive{5000};      // idle time of a kept-alive connection
};

class HttpServer {
 public:
  HttpServer(Service& service, HttpServerOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (IoError naming them when it cannot) and starts serving.
  void start();
  // Idempotent. Open streams end with their request cancelled; returns when every worker is done.
  void stop();
  int port() const;
  const std::string& model_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace libai
