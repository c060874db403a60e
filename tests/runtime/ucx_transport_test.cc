// The real UCX stack, no mocks: two processes on loopback exchange worker addresses over a
// socketpair and move 4 MiB both ways; blocking calls with nobody on the other side time out
// with CommunicationError instead of hanging.
#include "runtime/comm/ucx_transport.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "runtime/error.h"
#include "tests/common/child_process.h"

namespace libai::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::ChildProcess;
using testing::read_all;
using testing::write_all;

constexpr std::size_t kBytes = 4u << 20;  // large enough for UCX's rendezvous protocol
constexpr std::uint64_t kTagData = 0x100, kTagSum = 0x101, kTagEcho = 0x102;
constexpr int kFdTimeoutMs = 20000;

std::uint8_t pattern(std::size_t i) { return static_cast<std::uint8_t>((i * 131 + 7) ^ (i >> 12)); }

std::uint64_t fnv1a(const std::uint8_t* data, std::size_t size) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

void send_blob(int fd, const std::vector<std::uint8_t>& blob) {
  auto size = static_cast<std::uint32_t>(blob.size());
  LIBAI_CHECK_KIND(IoError, write_all(fd, &size, 4) && write_all(fd, blob.data(), blob.size()),
                   "socketpair write failed");
}

std::vector<std::uint8_t> recv_blob(int fd) {
  std::uint32_t size = 0;
  LIBAI_CHECK_KIND(IoError, read_all(fd, &size, 4, kFdTimeoutMs), "socketpair read failed");
  std::vector<std::uint8_t> blob(size);
  LIBAI_CHECK_KIND(IoError, read_all(fd, blob.data(), size, kFdTimeoutMs),
                   "socketpair read failed");
  return blob;
}

// The child: every UCX object is created after fork(). It never returns into gtest.
int child_main(int fd) {
  try {
    UcxContext context;
    UcxWorker worker(context, "child");
    send_blob(fd, worker.address());
    UcxEndpoint parent(worker, recv_blob(fd), "parent");
    std::vector<std::uint8_t> buffer(kBytes);
    if (parent.recv(kTagData, buffer.data(), buffer.size(), 20s) != kBytes) return 2;
    for (std::size_t i = 0; i < kBytes; ++i) {
      if (buffer[i] != pattern(i)) return 3;
    }
    const std::uint64_t sum = fnv1a(buffer.data(), buffer.size());
    parent.send(kTagSum, &sum, sizeof sum, 20s);
    parent.send(kTagEcho, buffer.data(), buffer.size(), 20s);
    // Keep the worker alive until the parent has everything.
    char ack = 0;
    if (!read_all(fd, &ack, 1, kFdTimeoutMs)) return 4;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ucx child: %s\n", e.what());
    return 1;
  }
}

TEST(UcxTransport_Dist, TwoProcessesExchangeFourMebibytes) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::fflush(nullptr);  // no buffered output duplicated into the child
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::_exit(child_main(fds[1]));  // _exit: no gtest, no atexit handlers in the child
  }
  ChildProcess child(pid);
  ::close(fds[1]);
  const int fd = fds[0];

  UcxContext context;
  UcxWorker worker(context, "parent");
  const auto child_address = recv_blob(fd);
  send_blob(fd, worker.address());
  UcxEndpoint peer(worker, child_address, "child");

  std::vector<std::uint8_t> data(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) data[i] = pattern(i);
  peer.send(kTagData, data.data(), data.size(), 20s);

  std::uint64_t sum = 0;
  EXPECT_EQ(peer.recv(kTagSum, &sum, sizeof sum, 20s), sizeof sum);
  EXPECT_EQ(sum, fnv1a(data.data(), data.size()));
  std::vector<std::uint8_t> echo(kBytes);
  EXPECT_EQ(peer.recv(kTagEcho, echo.data(), echo.size(), 20s), kBytes);
  EXPECT_TRUE(echo == data);

  const char ack = 1;
  EXPECT_TRUE(write_all(fd, &ack, 1));
  EXPECT_EQ(child.wait(20s), 0) << "child exit code (1: exception, 2-3: bad data, -1: hung)";
  ::close(fd);
}

// A peer that exits before receiving: the send fails (peer error or timeout), never hangs.
TEST(UcxTransport_Dist, SendToADeadPeerFails) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    int code = 1;
    try {
      UcxContext context;
      UcxWorker worker(context, "short-lived child");
      send_blob(fds[1], worker.address());
      char connected = 0;  // exit only once the parent holds an endpoint to us
      code = read_all(fds[1], &connected, 1, kFdTimeoutMs) ? 0 : 4;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ucx child: %s\n", e.what());
    }
    ::_exit(code);
  }
  ChildProcess child(pid);
  ::close(fds[1]);
  UcxContext context;
  UcxWorker worker(context, "parent");
  UcxEndpoint peer(worker, recv_blob(fds[0]), "dead child");
  const char connected = 1;
  ASSERT_TRUE(write_all(fds[0], &connected, 1));
  ASSERT_EQ(child.wait(20s), 0);
  ::close(fds[0]);
  std::vector<std::uint8_t> big(kBytes, 9);
  const auto start = Clock::now();
  EXPECT_THROW(peer.send(5, big.data(), big.size(), 3s), CommunicationError);
  EXPECT_LT(Clock::now() - start, 10s);
}

TEST(UcxTransport, RecvWithNoSenderTimesOut) {
  UcxContext context;
  UcxWorker worker(context, "lonely");
  std::vector<std::uint8_t> buffer(64);
  const auto start = Clock::now();
  try {
    worker.recv(0x2a, buffer.data(), buffer.size(), 200ms, "rank 7");
    FAIL() << "recv returned without a sender";
  } catch (const CommunicationError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("tag 0x2a"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 7"), std::string::npos) << message;
    EXPECT_NE(message.find("timed out"), std::string::npos) << message;
  }
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, 3s);
}

// Two workers of one process, each driven by its own thread (a worker is single-threaded).
TEST(UcxTransport, InProcessRoundTripAndTruncation) {
  UcxContext context;
  UcxWorker a(context, "a"), b(context, "b");
  UcxEndpoint a_to_b(a, b.address(), "b");
  std::vector<std::uint8_t> small(64, 0x5c), big(kBytes, 0x33);
  std::vector<std::uint8_t> got(kBytes);
  std::string receiver_error;
  std::size_t got_length = 0;
  std::thread receiver([&] {
    try {
      got_length = b.recv(1, got.data(), got.size(), 10s);
      std::uint8_t tiny[16];
      b.recv(2, tiny, sizeof tiny, 10s);
    } catch (const CommunicationError& e) {
      receiver_error = e.what();
    }
  });
  a_to_b.send(1, big.data(), big.size(), 10s);
  a_to_b.send(2, small.data(), small.size(), 10s);
  receiver.join();
  EXPECT_EQ(got_length, kBytes);
  EXPECT_TRUE(got == big);
  EXPECT_NE(receiver_error.find("larger than the 16-byte buffer"), std::string::npos)
      << receiver_error;
}

TEST(UcxTransport, SendThatNobodyReceivesTimesOutAndClosesTheEndpoint) {
  UcxContext context;
  UcxWorker a(context, "a"), b(context, "b");  // b is never progressed
  UcxEndpoint a_to_b(a, b.address(), "b");
  std::vector<std::uint8_t> big(kBytes, 1);
  const auto start = Clock::now();
  EXPECT_THROW(a_to_b.send(3, big.data(), big.size(), 300ms), CommunicationError);
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_TRUE(a_to_b.broken());
  EXPECT_THROW(a_to_b.send(3, big.data(), 8, 300ms), CommunicationError);
}

TEST(UcxTransport, EmptyPeerAddressIsRejected) {
  UcxContext context;
  UcxWorker worker(context);
  EXPECT_THROW(UcxEndpoint(worker, std::vector<std::uint8_t>{}, "nobody"), CommunicationError);
}

}  // namespace
}  // namespace libai::comm
