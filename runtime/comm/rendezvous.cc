#include "runtime/comm/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Frames: [u8 kind][u32 length][bytes]. A joining rank first sends a hello frame.
constexpr std::uint8_t kFrameOk = 0, kFrameError = 1;
constexpr std::uint32_t kMagic = 0x4c42525a;  // "LBRZ"
constexpr std::uint32_t kMaxFrame = 64u << 20;
// How long the rest of a hello may take once its first bytes came (Note [Strangers at the
// rendezvous]).
constexpr std::chrono::seconds kHelloRest{2};

struct Hello {
  std::uint32_t magic = kMagic;
  std::int32_t rank = 0;
  std::int32_t size = 0;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? int(left.count()) : 0;
}

// Both return an empty string on success, else what went wrong.
std::string write_all(int fd, const void* data, std::size_t size, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, remaining_ms(deadline)) <= 0) return "timed out sending";
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return str_cat("send failed: ", std::strerror(errno));
    p += n;
    size -= std::size_t(n);
  }
  return {};
}

std::string read_all(int fd, void* data, std::size_t size, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, remaining_ms(deadline)) <= 0) return "timed out";
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) return "connection closed";
    if (n < 0) return str_cat("recv failed: ", std::strerror(errno));
    p += n;
    size -= std::size_t(n);
  }
  return {};
}

std::string write_frame(int fd, std::uint8_t kind, std::span<const std::uint8_t> bytes,
                        Clock::time_point deadline) {
  std::vector<std::uint8_t> frame(5 + bytes.size());
  frame[0] = kind;
  const auto length = std::uint32_t(bytes.size());
  std::memcpy(frame.data() + 1, &length, 4);
  if (!bytes.empty()) std::memcpy(frame.data() + 5, bytes.data(), bytes.size());
  return write_all(fd, frame.data(), frame.size(), deadline);
}

std::string read_frame(int fd, std::uint8_t* kind, Blob* bytes, Clock::time_point deadline,
                       std::uint32_t max_length = kMaxFrame) {
  std::uint8_t head[5];
  if (auto e = read_all(fd, head, 5, deadline); !e.empty()) return e;
  *kind = head[0];
  std::uint32_t length = 0;
  std::memcpy(&length, head + 1, 4);
  if (length > max_length) return str_cat("frame of ", length, " bytes is not from a rank");
  bytes->resize(length);
  return read_all(fd, bytes->data(), length, deadline);
}

sockaddr_in resolve(const std::string& addr, int port) {
  LIBAI_CHECK(port >= 0 && port < 65536, "rendezvous: port ", port, " out of range");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  LIBAI_CHECK_KIND(CommunicationError, rc == 0 && found != nullptr, "rendezvous: cannot resolve '",
                   addr, "': ", ::gai_strerror(rc));
  sockaddr_in out{};
  std::memcpy(&out, found->ai_addr, sizeof out);
  ::freeaddrinfo(found);
  out.sin_port = htons(std::uint16_t(port));
  return out;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Packs the blobs of all ranks as [u32 count]([u32 length][bytes])*.
Blob pack(const std::vector<Blob>& blobs) {
  Blob out(4);
  const auto count = std::uint32_t(blobs.size());
  std::memcpy(out.data(), &count, 4);
  for (const Blob& b : blobs) {
    const auto length = std::uint32_t(b.size());
    out.insert(out.end(), reinterpret_cast<const std::uint8_t*>(&length),
               reinterpret_cast<const std::uint8_t*>(&length) + 4);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

bool unpack(const Blob& packed, std::size_t count, std::vector<Blob>* blobs) {
  std::size_t at = 4;
  std::uint32_t n = 0;
  if (packed.size() < 4) return false;
  std::memcpy(&n, packed.data(), 4);
  if (n != count) return false;
  blobs->assign(count, {});
  for (Blob& b : *blobs) {
    std::uint32_t length = 0;
    if (packed.size() < at + 4) return false;
    std::memcpy(&length, packed.data() + at, 4);
    at += 4;
    if (packed.size() < at + length) return false;
    b.assign(packed.begin() + std::ptrdiff_t(at), packed.begin() + std::ptrdiff_t(at + length));
    at += length;
  }
  return at == packed.size();
}

}  // namespace

Rendezvous::Rendezvous(RendezvousOptions options) : options_(std::move(options)) {
  LIBAI_CHECK(options_.size >= 1 && options_.rank >= 0 && options_.rank < options_.size,
              "rendezvous: rank ", options_.rank, " is not in a world of size ", options_.size);
  port_ = options_.port;
  if (options_.rank == 0) {
    listen_and_accept();
  } else {
    join();
  }
}

Rendezvous::~Rendezvous() {
  close_fd(listen_fd_);
  for (int& fd : peer_fds_) close_fd(fd);
}

std::string Rendezvous::endpoint() const { return str_cat(options_.addr, ":", port_); }

void Rendezvous::fail(const std::string& what) {
  const std::string message = str_cat("rendezvous at ", endpoint(), ", rank ", options_.rank,
                                      " of ", options_.size, ": ", what);
  if (options_.rank == 0) {  // tell the ranks that joined, best effort, so they fail with this
    const auto deadline = Clock::now() + std::chrono::milliseconds(500);
    const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(message.data()),
                                              message.size());
    for (int fd : peer_fds_) {
      if (fd >= 0) write_frame(fd, kFrameError, bytes, deadline);
    }
  }
  close_fd(listen_fd_);
  for (int& fd : peer_fds_) close_fd(fd);
  throw CommunicationError(message);
}

void Rendezvous::listen_and_accept() {
  const auto deadline = Clock::now() + options_.timeout;
  const sockaddr_in address = resolve(options_.addr, options_.port);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) fail(str_cat("socket: ", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    fail(str_cat("cannot listen: bind: ", std::strerror(errno)));
  }
  if (::listen(listen_fd_, 128) != 0) fail(str_cat("listen: ", std::strerror(errno)));
  sockaddr_in bound{};
  socklen_t length = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.sin_port);
  logger("comm")->debug("rendezvous listening on {}", endpoint());
  if (options_.on_listening) options_.on_listening(port_);

  peer_fds_.assign(std::size_t(options_.size), -1);
  // Note [Strangers at the rendezvous]
  // Whoever connects to the port is a candidate until its hello frame arrives; a real rank
  // sends it as soon as it connects. Candidates wait side by side (one poll over all of them),
  // so a client that connects and says nothing cannot hold the ranks behind it: it is dropped
  // after `hello_wait`, and one whose first bytes are not a hello at once. Both are logged with
  // the peer's address, as the control port does (actors/cluster/guarded_publish.h).
  struct Candidate {
    int fd;
    std::string peer;
    Clock::time_point until;
  };
  std::vector<Candidate> candidates;
  struct CloseAll {
    std::vector<Candidate>& candidates;
    ~CloseAll() {
      for (Candidate& c : candidates) close_fd(c.fd);
    }
  } close_candidates{candidates};
  const auto drop = [&](Candidate& c, const std::string& why) {
    logger("comm")->warn("rendezvous at {}: {} from {}; dropping the connection", endpoint(), why,
                         c.peer);
    close_fd(c.fd);
  };
  int joined = 1;
  while (joined < options_.size) {
    if (Clock::now() >= deadline) {
      std::string missing;
      for (int r = 1; r < options_.size; ++r) {
        if (peer_fds_[std::size_t(r)] < 0) missing += str_cat(missing.empty() ? "" : ", ", r);
      }
      fail(str_cat("timed out after ", options_.timeout.count(), " ms waiting for ranks to join; ",
                   joined, " of ", options_.size, " joined, missing rank(s) ", missing));
    }
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    auto wake = deadline;
    for (const Candidate& c : candidates) {
      fds.push_back({c.fd, POLLIN, 0});
      wake = std::min(wake, c.until);
    }
    if (::poll(fds.data(), fds.size(), remaining_ms(wake)) < 0 && errno != EINTR) {
      fail(str_cat("poll: ", std::strerror(errno)));
    }
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      Candidate& c = candidates[i];
      if (fds[i + 1].revents == 0) {
        if (Clock::now() >= c.until) {
          drop(c, str_cat("a connection that sent no hello in ", options_.hello_wait.count(),
                          " ms"));
        }
        continue;
      }
      Hello hello;
      std::uint8_t kind = 0;
      Blob bytes;
      // The hello is 17 bytes: once the first arrived, the rest follows at once.
      const std::string error =
          read_frame(c.fd, &kind, &bytes, std::min(deadline, Clock::now() + kHelloRest),
                     sizeof hello);
      if (error.empty() && bytes.size() == sizeof hello)
        std::memcpy(&hello, bytes.data(), sizeof hello);
      if (!error.empty() || bytes.size() != sizeof hello || hello.magic != kMagic) {
        drop(c, error.empty() ? std::string("bytes that are not a rank's hello")
                              : str_cat("a connection that is not a rank's (", error, ")"));
        continue;
      }
      const int fd = std::exchange(c.fd, -1);
      if (hello.size != options_.size) {
        peer_fds_.push_back(fd);  // so that fail() tells it too
        fail(str_cat("rank ", hello.rank, " joined with world size ", hello.size, ", rank 0 has ",
                     options_.size));
      }
      if (hello.rank <= 0 || hello.rank >= options_.size ||
          peer_fds_[std::size_t(hello.rank)] >= 0) {
        peer_fds_.push_back(fd);
        fail(str_cat("rank ", hello.rank, " joined twice or is out of range [1, ", options_.size,
                     ")"));
      }
      const int nodelay = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
      peer_fds_[std::size_t(hello.rank)] = fd;
      ++joined;
    }
    std::erase_if(candidates, [](const Candidate& c) { return c.fd < 0; });
    if (fds[0].revents & POLLIN) {
      sockaddr_in from{};
      socklen_t from_size = sizeof from;
      const int fd =
          ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_size, SOCK_CLOEXEC);
      if (fd >= 0) {
        char host[INET_ADDRSTRLEN] = "?";
        ::inet_ntop(AF_INET, &from.sin_addr, host, sizeof host);
        candidates.push_back({fd, str_cat(host, ":", ntohs(from.sin_port)),
                              Clock::now() + options_.hello_wait});
      }
    }
  }
  close_fd(listen_fd_);
  for (int r = 1; r < options_.size; ++r) {  // everyone is here: let them go
    const std::string e = write_frame(peer_fds_[std::size_t(r)], kFrameOk, {}, deadline);
    if (!e.empty()) fail(str_cat("welcoming rank ", r, ": ", e));
  }
}

void Rendezvous::join() {
  const auto deadline = Clock::now() + options_.timeout;
  const sockaddr_in address = resolve(options_.addr, options_.port);
  LIBAI_CHECK(options_.port != 0, "rendezvous: rank ", options_.rank,
              " needs rank 0's port (port 0 only lets rank 0 pick one)");
  std::string last_error = "no attempt";
  int fd = -1;
  while (true) {  // retry until rank 0 listens
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) fail(str_cat("socket: ", std::strerror(errno)));
    // Non-blocking, so that an unreachable host cannot hold us past the deadline.
    int error = 0;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        pollfd pfd{fd, POLLOUT, 0};
        socklen_t length = sizeof error;
        if (::poll(&pfd, 1, std::min(remaining_ms(deadline), 1000)) == 1) {
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
        } else {
          error = ETIMEDOUT;
        }
      }
    }
    if (error == 0) break;
    last_error = std::strerror(error);
    ::close(fd);
    fd = -1;
    if (Clock::now() >= deadline) {
      fail(str_cat("could not connect to rank 0 within ", options_.timeout.count(),
                   " ms (nobody listening? last error: ", last_error, ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int nodelay = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
  peer_fds_.assign(1, fd);
  Hello hello;
  hello.rank = options_.rank;
  hello.size = options_.size;
  const std::span<const std::uint8_t> hello_bytes(reinterpret_cast<const std::uint8_t*>(&hello),
                                                  sizeof hello);
  if (auto e = write_frame(fd, kFrameOk, hello_bytes, deadline); !e.empty()) {
    fail(str_cat("sending hello to rank 0: ", e));
  }
  std::uint8_t kind = 0;
  Blob reply;
  if (auto e = read_frame(fd, &kind, &reply, deadline); !e.empty()) {
    fail(str_cat("waiting for the other ranks to join: ", e, " after ", options_.timeout.count(),
                 " ms"));
  }
  if (kind == kFrameError) {
    close_fd(peer_fds_[0]);
    throw CommunicationError(
        str_cat("rank ", options_.rank, " was refused: ", std::string(reply.begin(), reply.end())));
  }
}

std::vector<Blob> Rendezvous::exchange(std::span<const std::uint8_t> mine) {
  const auto deadline = Clock::now() + options_.timeout;
  std::vector<Blob> all(std::size_t(options_.size));
  all[std::size_t(options_.rank)].assign(mine.begin(), mine.end());
  if (options_.size == 1) return all;
  LIBAI_CHECK_KIND(CommunicationError, !peer_fds_.empty() && peer_fds_.back() >= 0,
                   "rendezvous at ", endpoint(), ": used after an earlier failure");
  std::uint8_t kind = 0;
  if (options_.rank == 0) {
    for (int r = 1; r < options_.size; ++r) {
      const std::string e =
          read_frame(peer_fds_[std::size_t(r)], &kind, &all[std::size_t(r)], deadline);
      if (!e.empty()) fail(str_cat("exchange: waiting for rank ", r, ": ", e));
    }
    const Blob packed = pack(all);
    for (int r = 1; r < options_.size; ++r) {
      const std::string e = write_frame(peer_fds_[std::size_t(r)], kFrameOk, packed, deadline);
      if (!e.empty()) fail(str_cat("exchange: sending to rank ", r, ": ", e));
    }
    return all;
  }
  if (auto e = write_frame(peer_fds_[0], kFrameOk, mine, deadline); !e.empty()) {
    fail(str_cat("exchange: sending to rank 0: ", e));
  }
  Blob packed;
  if (auto e = read_frame(peer_fds_[0], &kind, &packed, deadline); !e.empty()) {
    fail(str_cat("exchange: waiting for rank 0: ", e));
  }
  if (kind == kFrameError) {
    close_fd(peer_fds_[0]);
    throw CommunicationError(std::string(packed.begin(), packed.end()));
  }
  if (!unpack(packed, all.size(), &all)) fail("exchange: malformed reply from rank 0");
  return all;
}

}  // namespace libai::comm
