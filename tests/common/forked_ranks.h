// Forked shm ranks for tests: run_ranks forks one child per rank, each makes a shm
// communicator (rank 0 picks the rendezvous port, the parent hands it on) and runs `body`,
// whose string comes back to the parent through a socketpair ("ok", or what went wrong).
// Children never return into gtest; the parent reaps every child.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/shm_communicator.h"
#include "runtime/error.h"
#include "tests/common/child_process.h"

namespace libai::comm::shm_testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using libai::testing::ChildProcess;
using libai::testing::read_all;
using libai::testing::write_all;

inline constexpr int kPipeTimeoutMs = 60000;

// A check that failed inside a child (not a library error).
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
template <typename... Args>
void require(bool ok, const Args&... args) {
  if (!ok) throw Failure(str_cat(args...));
}

inline std::int64_t now_ns() {  // CLOCK_MONOTONIC: comparable between the processes of one host
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

inline void send_text(int fd, const std::string& text) {
  const auto size = std::uint32_t(text.size());
  write_all(fd, &size, 4) && write_all(fd, text.data(), text.size());
}

inline std::string recv_text(int fd) {
  std::uint32_t size = 0;
  if (!read_all(fd, &size, 4, kPipeTimeoutMs)) return "<no report>";
  std::string text(size, '\0');
  return read_all(fd, text.data(), size, kPipeTimeoutMs) ? text : "<truncated report>";
}

using Body = std::function<std::string(Communicator& comm, int report_fd)>;

inline int child_main(int rank, int size, int fd, std::chrono::milliseconds timeout, bool cma,
               const Body& body) {
  std::string report;
  try {
    ShmGroupOptions options;
    options.rank = rank;
    options.size = size;
    options.timeout = timeout;
    options.cross_memory_attach = cma;
    if (rank == 0) {
      options.on_listening = [fd](int port) { send_text(fd, std::to_string(port)); };
    } else {
      require(read_all(fd, &options.port, sizeof options.port, kPipeTimeoutMs), "no port");
    }
    auto comm = make_shm_communicator(options);
    require(cma == shm_uses_cross_memory_attach(*comm), "cross-memory attach ",
            cma ? "not in use although the kernel allows it" : "in use although refused");
    report = body(*comm, fd);
  } catch (const Failure& e) {
    report = str_cat("FAILED: ", e.what());
  } catch (const std::exception& e) {
    report = str_cat("ERROR: ", e.what());
  }
  send_text(fd, report);
  return report.rfind("FAILED", 0) == 0 || report.rfind("ERROR", 0) == 0 ? 1 : 0;
}

// Runs body on `size` forked ranks; returns each rank's report.
inline std::vector<std::string> run_ranks(int size, const Body& body,
                                   std::chrono::milliseconds timeout = 20s, bool cma = true) {
  std::vector<int> fds;
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int rank = 0; rank < size; ++rank) {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pair[0]);
      ::_exit(child_main(rank, size, pair[1], timeout, cma, body));  // never back into gtest
    }
    ::close(pair[1]);
    fds.push_back(pair[0]);
    children.push_back(std::make_unique<ChildProcess>(pid));
  }
  const int port = std::atoi(recv_text(fds[0]).c_str());
  for (int rank = 1; rank < size; ++rank) write_all(fds[std::size_t(rank)], &port, sizeof port);
  std::vector<std::string> reports;
  for (int rank = 0; rank < size; ++rank) {
    reports.push_back(recv_text(fds[std::size_t(rank)]));
    children[std::size_t(rank)]->wait(20s);
    ::close(fds[std::size_t(rank)]);
  }
  return reports;
}

inline void expect_all_ok(const std::vector<std::string>& reports) {
  for (std::size_t r = 0; r < reports.size(); ++r) EXPECT_EQ(reports[r], "ok") << "rank " << r;
}

}  // namespace libai::comm::shm_testing
