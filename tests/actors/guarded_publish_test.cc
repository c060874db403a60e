// publish_guarded (actors/cluster/guarded_publish.h): bytes that are not CAF's BASP on the published
// port are logged with the peer's address and the connection is dropped, while a real peer
// (another actor system's middleman) still connects and talks to the published actor.
#include "actors/cluster/guarded_publish.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <caf/io/all.hpp>

#include <chrono>

#include "runtime/error.h"
#include "tests/common/captured_log.h"

namespace libai::actors {
namespace {

using namespace std::chrono_literals;

struct CafSystem {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  CafSystem() {
    config.load<caf::io::middleman>();
    config.set("scheduler.max-threads", 2);
    system = std::make_unique<caf::actor_system>(config);
  }
};

using testing::CapturedLog;

// A raw TCP client on 127.0.0.1:`port`: sends `bytes` (then, with `end_sending`, closes its
// sending side), then reads until the server closes the connection or `timeout` passes.
// Returns true when the server closed it; sets `local_port`.
bool send_and_wait_for_close(std::uint16_t port, const std::string& bytes,
                             std::chrono::seconds timeout, std::uint16_t* local_port,
                             bool end_sending = false) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval wait{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  bool closed = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) {
    sockaddr_in me{};
    socklen_t size = sizeof me;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &size);
    *local_port = ntohs(me.sin_port);
    if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size())) {
      if (end_sending) ::shutdown(fd, SHUT_WR);
      char buffer[4096];
      while (true) {
        const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n == 0) closed = true;
        if (n <= 0) break;  // closed, or the deadline passed (EAGAIN), or reset
      }
    }
  }
  ::close(fd);
  return closed;
}

caf::behavior adder() {
  return {[](int x) { return x + 1; }};
}

TEST(GuardedPublish, GarbageIsLoggedWithThePeerAndDroppedAndRealPeersStillConnect) {
  CapturedLog log("cluster");
  CafSystem server;
  const caf::actor published = server.system->spawn(adder);
  auto port = publish_guarded(*server.system, published, 0, "127.0.0.1", true, "node 0");
  ASSERT_TRUE(port) << server.system->render(port.error());

  // An HTTP request: 64 bytes, so more than one BASP header (32 bytes).
  const std::string http = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n....";
  std::uint16_t client_port = 0;
  EXPECT_TRUE(send_and_wait_for_close(*port, http, 10s, &client_port))
      << "the server did not close the connection";
  const std::string peer = str_cat("from 127.0.0.1:", client_port, " on port ", *port);
  const std::string written = log.wait_for(peer, 10s);
  EXPECT_NE(written.find("node 0: 32 bytes " + peer + " that are not the cluster's protocol"),
            std::string::npos)
      << written;
  EXPECT_NE(written.find("dropping the connection"), std::string::npos) << written;

  // A real peer, after the garbage: its middleman connects and the actor answers.
  CafSystem client;
  auto remote = client.system->middleman().remote_actor("127.0.0.1", *port);
  ASSERT_TRUE(remote) << client.system->render(remote.error());
  caf::scoped_actor self{*client.system};
  int answer = 0;
  self->request(*remote, std::chrono::seconds(10), 41)
      .receive([&](int x) { answer = x; },
               [&](caf::error& e) { ADD_FAILURE() << client.system->render(e); });
  EXPECT_EQ(answer, 42);
  // The real peer was not taken for garbage: one warning, the raw client's.
  const std::string after = log.wait_for("", 0ms);
  const std::string warning = "not the cluster's protocol";
  EXPECT_EQ(after.find(warning), after.rfind(warning)) << after;
  caf::anon_send_exit(published, caf::exit_reason::user_shutdown);
}

// Fewer bytes than one BASP header, or none, then the end of the stream: BASP never reads a
// header from such a peer, and the guard logs it when the connection ends.
TEST(GuardedPublish, PeersThatEndBeforeAWholeHeaderAreLogged) {
  CapturedLog log("cluster");
  CafSystem server;
  const caf::actor published = server.system->spawn(adder);
  auto port = publish_guarded(*server.system, published, 0, "127.0.0.1", true, "node 0");
  ASSERT_TRUE(port) << server.system->render(port.error());
  for (const std::string& bytes : {std::string("PING\r\n"), std::string()}) {
    std::uint16_t client_port = 0;
    EXPECT_TRUE(send_and_wait_for_close(*port, bytes, 10s, &client_port, true))
        << "the server did not close the connection after " << bytes.size() << " bytes";
    const std::string line = str_cat("node 0: the connection from 127.0.0.1:", client_port,
                                      " on port ", *port, " ended before it sent a whole BASP");
    const std::string written = log.wait_for(line, 10s);
    EXPECT_NE(written.find(line), std::string::npos) << written;
  }
  caf::anon_send_exit(published, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace libai::actors
