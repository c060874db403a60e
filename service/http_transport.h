// The socket side of the HTTP server: cpp-httplib's request parsing and routing over our own
// connection loop, which bounds what a client can make the server read and wait for (Note
// [Bounded connections]). Internal to service/http_server.cc.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace libai::http {

struct ConnectionLimits {
  size_t max_header_bytes = 64 << 10;  // request line and headers
  size_t max_body_bytes = 1 << 20;
  std::chrono::milliseconds read_timeout{10000};   // a whole request must arrive within this
  std::chrono::milliseconds write_timeout{10000};  // each write must progress within this
  std::chrono::milliseconds keep_alive{5000};      // idle time between requests
  int keep_alive_requests = 100;                   // requests per connection
};

// The request a worker thread is serving now (a thread serves one connection at a time, and
// cpp-httplib runs the handlers, content providers and logger of a request on that thread).
struct Exchange {
  int socket = -1;
  std::chrono::steady_clock::time_point start;
  bool close_after = false;  // close the connection after this response (its body was not read)
  // For the log line and metrics, set by the handlers.
  int64_t prompt_tokens = -1, completion_tokens = -1;
  const char* finish = "";
  bool client_gone = false;
};
Exchange& current_exchange();

// True when the peer has closed or reset the connection (it can send nothing more, and what we
// send is lost): a streaming or waiting handler checks it to cancel work nobody will read.
bool peer_gone(int socket);

class BoundedServer : public httplib::Server {
 public:
  explicit BoundedServer(const ConnectionLimits& limits);
  void begin_stopping() { stopping_ = true; }
  bool stopping() const { return stopping_; }
  const ConnectionLimits& limits() const { return limits_; }
  // After bind: a listen backlog for bursts of clients (cpp-httplib's is 5).
  void widen_backlog();

 private:
  bool process_and_close_socket(socket_t sock) override;

  ConnectionLimits limits_;
  std::atomic<bool> stopping_{false};
};

}  // namespace libai::http
