#include "service/http_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace libai::http {
namespace {

using Clock = std::chrono::steady_clock;

// Waits up to `timeout` for `events` on `socket`; false on timeout or error.
bool wait_for(int socket, short events, std::chrono::milliseconds timeout) {
  pollfd p{socket, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, int(std::max<int64_t>(0, timeout.count())));
    if (n > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
    if (n == 0 || errno != EINTR) return false;
  }
}

void address_of(int socket, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  const int rc = peer ? ::getpeername(socket, reinterpret_cast<sockaddr*>(&address), &length)
                      : ::getsockname(socket, reinterpret_cast<sockaddr*>(&address), &length);
  if (rc != 0) return;
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    port = ntohs(a->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    port = ntohs(a->sin6_port);
  }
  ip = text;
}

// Note [Bounded connections]
// cpp-httplib 0.11 reads a request line of any length, a chunked body of any size, and gives a
// slow client a fresh read timeout for every byte, so a client could hold a worker thread, or
// memory, without bound. Our stream under its parser closes those doors:
//   - a request must arrive whole within read_timeout of its first byte (a deadline, not an
//     idle timeout), after which the read fails and the connection is closed;
//   - it may not be larger than max_header_bytes + max_body_bytes: past that a read fails;
//   - a body announced larger than max_body_bytes is refused with 413 before any of it is read
//     (service/http_server.cc), and the connection is closed after the answer, since the unread
//     body cannot be skipped cheaply.
// A stalled client thus costs one worker thread for at most read_timeout, and the others keep
// serving.
class SocketStream : public httplib::Stream {
 public:
  SocketStream(int socket, const ConnectionLimits& limits) : socket_(socket), limits_(limits) {}

  // A new request starts: its deadline and byte budget.
  void begin_request() {
    deadline_ = Clock::now() + limits_.read_timeout;
    budget_ = limits_.max_header_bytes + limits_.max_body_bytes;
  }
  bool has_buffered() const { return begin_ < end_; }

  bool is_readable() const override {
    return has_buffered() || wait_for(socket_, POLLIN, remaining());
  }
  bool is_writable() const override { return wait_for(socket_, POLLOUT, limits_.write_timeout); }

  ssize_t read(char* out, size_t size) override {
    if (!has_buffered()) {
      if (budget_ == 0) return -1;
      if (!wait_for(socket_, POLLIN, remaining())) return -1;
      const ssize_t n = ::recv(socket_, buffer_, std::min(sizeof buffer_, budget_), 0);
      if (n <= 0) return n == 0 ? 0 : -1;
      begin_ = 0;
      end_ = size_t(n);
      budget_ -= size_t(n);
    }
    const size_t n = std::min(size, end_ - begin_);
    std::memcpy(out, buffer_ + begin_, n);
    begin_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* data, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!wait_for(socket_, POLLOUT, limits_.write_timeout)) return -1;
      const ssize_t n = ::send(socket_, data + done, size - done, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return -1;
      done += size_t(n);
    }
    return ssize_t(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(socket_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(socket_, false, ip, port);
  }
  socket_t socket() const override { return socket_; }

 private:
  std::chrono::milliseconds remaining() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
  }

  int socket_;
  ConnectionLimits limits_;
  Clock::time_point deadline_ = Clock::now();
  size_t budget_ = 0;
  char buffer_[16 << 10];
  size_t begin_ = 0, end_ = 0;
};

}  // namespace

Exchange& current_exchange() {
  thread_local Exchange exchange;
  return exchange;
}

bool peer_gone(int socket) {
  if (socket < 0) return false;
  pollfd p{socket, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

BoundedServer::BoundedServer(const ConnectionLimits& limits) : limits_(limits) {
  set_keep_alive_max_count(size_t(limits.keep_alive_requests));
  set_keep_alive_timeout(std::max<time_t>(1, limits.keep_alive.count() / 1000));
  set_payload_max_length(limits.max_body_bytes);
}

void BoundedServer::widen_backlog() {
  // Linux takes a second listen() on a listening socket as a new backlog.
  ::listen(int(svr_sock_), 1024);
}

bool BoundedServer::process_and_close_socket(socket_t sock) {
  SocketStream stream(int(sock), limits_);
  bool ok = false;
  for (int left = limits_.keep_alive_requests; left > 0 && !stopping_; --left) {
    // Wait for the next request in short slices so that stop() is noticed.
    const auto idle_until = Clock::now() + limits_.keep_alive;
    bool ready = stream.has_buffered();
    while (!ready && !stopping_ && Clock::now() < idle_until)
      ready = wait_for(int(sock), POLLIN, std::chrono::milliseconds(100));
    if (!ready || stopping_) break;
    Exchange& exchange = current_exchange();
    exchange = Exchange{};
    exchange.socket = int(sock);
    exchange.start = Clock::now();
    stream.begin_request();
    bool connection_closed = false;
    ok = process_request(stream, left == 1, connection_closed, nullptr);
    if (!ok || connection_closed || exchange.close_after || exchange.client_gone) break;
  }
  ::shutdown(int(sock), SHUT_RDWR);
  ::close(int(sock));
  current_exchange() = Exchange{};
  return ok;
}

}  // namespace libai::http
