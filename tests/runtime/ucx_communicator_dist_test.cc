// The ucx communicator's rendezvous, in-process on threads: its failures name the address
// and what timed out. The communicator cases (every backend, real processes) are in
// communicator_dist_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>
#include <vector>

#include "runtime/comm/rendezvous.h"
#include "runtime/comm/ucx_communicator.h"
#include "runtime/error.h"
#include "tests/common/captured_log.h"

namespace libai::comm {
namespace {

using namespace std::chrono_literals;

// In-process: rendezvous failures name the address and what timed out.
TEST(UcxRendezvous, NobodyListeningTimesOutNamingTheAddress) {
  UcxGroupOptions options;
  options.rank = 1;
  options.size = 2;
  options.port = 1;  // privileged and closed: connection refused
  options.timeout = 300ms;
  try {
    make_ucx_communicator(options);
    FAIL() << "no error";
  } catch (const CommunicationError& e) {
    EXPECT_NE(
        std::string(e.what()).find("rendezvous at 127.0.0.1:1, rank 1 of 2: could not connect"),
        std::string::npos)
        << e.what();
  }
}

std::string rendezvous_error(RendezvousOptions options) {
  try {
    Rendezvous store(std::move(options));
    return "no error";
  } catch (const CommunicationError& e) {
    return e.what();
  }
}

TEST(UcxRendezvous, WrongWorldSizeAndMissingRanksFailEveryone) {
  for (const int joiner_size : {2, 3}) {  // 2: disagrees with rank 0; 3: rank 2 never comes
    std::promise<int> port;
    auto server = std::async(std::launch::async, [&] {
      return rendezvous_error({0, 3, "127.0.0.1", 0, 1500ms, [&](int p) { port.set_value(p); }});
    });
    const int p = port.get_future().get();
    const std::string joiner = rendezvous_error({1, joiner_size, "127.0.0.1", p, 3000ms, {}});
    const std::string host = server.get();
    const std::string expected =
        joiner_size == 2 ? "rank 1 joined with world size 2, rank 0 has 3" : "missing rank(s) 2";
    EXPECT_NE(host.find(str_cat("rendezvous at 127.0.0.1:", p)), std::string::npos) << host;
    EXPECT_NE(host.find(expected), std::string::npos) << host;
    EXPECT_NE(joiner.find(expected), std::string::npos) << joiner;
  }
}

TEST(UcxRendezvous, ExchangesBlobsAmongThreeRanks) {
  std::promise<int> port;
  std::shared_future<int> chosen = port.get_future().share();
  std::vector<std::future<std::vector<Blob>>> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      RendezvousOptions options{r, 3, "127.0.0.1", r == 0 ? 0 : chosen.get(), 5000ms, {}};
      if (r == 0) options.on_listening = [&](int p) { port.set_value(p); };
      Rendezvous store(options);
      store.exchange(Blob(std::size_t(r), std::uint8_t(r)));  // a first round
      return store.exchange(Blob(std::size_t(r + 1), std::uint8_t(10 + r)));
    }));
  }
  for (auto& rank : ranks) {
    const std::vector<Blob> all = rank.get();
    ASSERT_EQ(all.size(), 3u);
    for (int q = 0; q < 3; ++q)
      EXPECT_EQ(all[std::size_t(q)], Blob(std::size_t(q + 1), std::uint8_t(10 + q)));
  }
}

// A raw client on 127.0.0.1:`port` that sends `bytes`; returns its socket and sets its port.
int connect_and_send(int port, const std::string& bytes, int* local_port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(std::uint16_t(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval wait{10, 0};  // a recv on it gives up after 10 s
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) return -1;
  sockaddr_in me{};
  socklen_t size = sizeof me;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &size);
  *local_port = ntohs(me.sin_port);
  if (!bytes.empty()) ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  return fd;
}

// Note [Strangers at the rendezvous]: a client that connects first and says nothing, and one
// that sends an HTTP request, hold nobody: the real rank behind them joins, and both are
// logged with their addresses and dropped.
TEST(UcxRendezvous, StrangersOnThePortAreLoggedAndDroppedWithoutHoldingTheRanks) {
  testing::CapturedLog log("comm");
  std::promise<int> port;
  auto server = std::async(std::launch::async, [&] {
    RendezvousOptions options{0, 2, "127.0.0.1", 0, 20000ms, [&](int p) { port.set_value(p); }};
    options.hello_wait = 1500ms;
    Rendezvous store(options);
    return store.exchange(Blob{7});
  });
  const int p = port.get_future().get();
  int silent_port = 0, http_port = 0;
  const int silent = connect_and_send(p, "", &silent_port);
  const int http = connect_and_send(p, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", &http_port);
  ASSERT_GE(silent, 0);
  ASSERT_GE(http, 0);
  const auto start = std::chrono::steady_clock::now();
  Rendezvous rank1({1, 2, "127.0.0.1", p, 20000ms, {}});
  const std::vector<Blob> all = rank1.exchange(Blob{8});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms)
      << "the silent client held the rank that came after it";
  EXPECT_EQ(all, (std::vector<Blob>{Blob{7}, Blob{8}}));
  EXPECT_EQ(server.get(), all);

  const std::string http_line =
      str_cat("from 127.0.0.1:", http_port, "; dropping the connection");
  std::string written = log.wait_for(http_line, 10s);
  EXPECT_NE(written.find(str_cat("rendezvous at 127.0.0.1:", p)), std::string::npos) << written;
  EXPECT_NE(written.find(http_line), std::string::npos) << written;
  // The silent client: still open while the ranks met, so not dropped (the rendezvous ended
  // first); one of a rendezvous still waiting is dropped after hello_wait (below).
  ::close(silent);
  ::close(http);
}

TEST(UcxRendezvous, ASilentConnectionIsDroppedAfterTheHelloWait) {
  testing::CapturedLog log("comm");
  std::promise<int> port;
  auto server = std::async(std::launch::async, [&] {
    RendezvousOptions options{0, 2, "127.0.0.1", 0, 20000ms, [&](int p) { port.set_value(p); }};
    options.hello_wait = 300ms;
    Rendezvous store(options);
    return store.exchange(Blob{});
  });
  const int p = port.get_future().get();
  int silent_port = 0;
  const int silent = connect_and_send(p, "", &silent_port);
  ASSERT_GE(silent, 0);
  const std::string line = str_cat("a connection that sent no hello in 300 ms from 127.0.0.1:",
                                   silent_port, "; dropping the connection");
  const std::string written = log.wait_for(line, 10s);
  EXPECT_NE(written.find(line), std::string::npos) << written;
  char byte = 0;
  EXPECT_EQ(::recv(silent, &byte, 1, 0), 0) << "rank 0 did not close the silent connection";
  ::close(silent);
  Rendezvous rank1({1, 2, "127.0.0.1", p, 20000ms, {}});
  EXPECT_EQ(rank1.exchange(Blob{}).size(), 2u);
  server.get();
}

}  // namespace
}  // namespace libai::comm
