// What the HTTP server tests share: a JSON client over cpp-httplib, server-sent events
// reassembled, raw sockets for misbehaving clients, and reading one Prometheus sample.
//
//   Reply r = post_json(port, "/v1/completions", {{"prompt", "Hi"}});   // r.status, r.body
//   auto events = post_stream(port, "/v1/completions", body);          // the data: payloads
//   RawSocket s(port);  s.send("POST /v1/... HTTP/1.1\r\n");  s.close();
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

namespace libai::testing {

using nlohmann::json;

inline httplib::Client client_for(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  client.set_connection_timeout(10, 0);
  return client;
}

struct Reply {
  int status = 0;
  json body;
  std::string text;
};

inline Reply post_raw(int port, const std::string& path, const std::string& body) {
  auto client = client_for(port);
  auto res = client.Post(path.c_str(), body, "application/json");
  Reply r;
  if (!res) {
    ADD_FAILURE() << "POST " << path << ": no answer (" << httplib::to_string(res.error()) << ")";
    return r;
  }
  r.status = res->status;
  r.text = res->body;
  r.body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  return r;
}

inline Reply post_json(int port, const std::string& path, const json& body) {
  return post_raw(port, path, body.dump());
}

inline Reply get(int port, const std::string& path) {
  auto client = client_for(port);
  auto res = client.Get(path.c_str());
  Reply r;
  if (!res) {
    ADD_FAILURE() << "GET " << path << ": no answer";
    return r;
  }
  r.status = res->status;
  r.text = res->body;
  r.body = json::parse(res->body, nullptr, false);
  return r;
}

// The payloads of the `data: ...` events of a streamed answer, in order ("[DONE]" included).
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string event = body.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << "not an event: " << event;
    out.push_back(event.substr(6));
    at = end + 2;
  }
  EXPECT_EQ(at, body.size()) << "trailing bytes after the last event";
  return out;
}

struct Streamed {
  int status = 0;
  std::string content_type;
  std::vector<std::string> payloads;
};

inline Streamed post_stream(int port, const std::string& path, const json& body) {
  auto client = client_for(port);
  auto res = client.Post(path.c_str(), body.dump(), "application/json");
  Streamed s;
  if (!res) {
    ADD_FAILURE() << "POST " << path << ": no answer";
    return s;
  }
  s.status = res->status;
  s.content_type = res->get_header_value("Content-Type");
  if (s.status == 200) s.payloads = sse_payloads(res->body);
  return s;
}

// A client that does what the library clients never do: stop half-way, close mid-stream.
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  }
  ~RawSocket() { close(); }
  void send(const std::string& data) {
    EXPECT_EQ(::send(fd_, data.data(), data.size(), MSG_NOSIGNAL), ssize_t(data.size()));
  }
  // Reads until `marker` has arrived, the peer closes, or `timeout` passes.
  std::string read_until(const std::string& marker, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (received_.find(marker) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) break;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        closed_by_peer_ = true;
        break;
      }
      received_.append(buffer, size_t(n));
    }
    return received_;
  }
  bool closed_by_peer() const { return closed_by_peer_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string received_;
  bool closed_by_peer_ = false;
};

// The value of the sample `name` (with `labels` exactly, e.g. `outcome="cancelled"`).
inline double metric(const std::string& text, const std::string& name,
                     const std::string& labels = "") {
  const std::string key = labels.empty() ? name + " " : name + "{" + labels + "} ";
  const size_t at = text.find("\n" + key);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + 1 + key.size()));
}

}  // namespace libai::testing
