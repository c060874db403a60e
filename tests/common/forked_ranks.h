// Forked ranks for tests of the process-group backends: run_ranks forks one child per rank,
// each makes a communicator of the given backend (rank 0 picks the rendezvous port, the parent
// hands it on) and runs `body`, whose string comes back to the parent through a socketpair
// ("ok", or what went wrong). Children never return into gtest; the parent reaps every child.
//
//   expect_all_ok(run_ranks(4, [](Communicator& comm, int) { ...; return std::string("ok"); },
//                           20s, ucx_backend()));
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/shm_communicator.h"
#include "runtime/comm/ucx_communicator.h"
#include "runtime/error.h"
#include "tests/common/child_process.h"
#include "tests/common/time_scale.h"

namespace libai::comm::forked_ranks {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using libai::testing::ChildProcess;
using libai::testing::read_all;
using libai::testing::write_all;

inline constexpr int kPipeTimeoutMs = 60000 * libai::testing::kTimeScale;

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

// A backend as the forked ranks make it, from the options run_ranks filled in.
struct Backend {
  std::string name;  // "ucx", "shm"
  bool cross_memory_attach = false;
  std::function<std::shared_ptr<Communicator>(ProcessGroupOptions&)> make;
};

inline Backend ucx_backend() {
  return {"ucx", false, [](ProcessGroupOptions& options) { return make_ucx_communicator(options); }};
}

// Checks that the communicator runs cross-memory attach exactly when asked to.
inline Backend shm_backend(bool cma) {
  return {"shm", cma, [cma](ProcessGroupOptions& options) {
            options.cross_memory_attach = cma;
            auto comm = make_shm_communicator(options);
            require(cma == shm_uses_cross_memory_attach(*comm), "cross-memory attach ",
                    cma ? "not in use although the kernel allows it" : "in use although refused");
            return comm;
          }};
}

inline int child_main(int rank, int size, int fd, std::chrono::milliseconds timeout,
                      const Backend& backend, const Body& body) {
  std::string report;
  try {
    ProcessGroupOptions options;
    options.rank = rank;
    options.size = size;
    options.timeout = timeout;
    if (rank == 0) {
      options.on_listening = [fd](int port) { send_text(fd, std::to_string(port)); };
    } else {
      require(read_all(fd, &options.port, sizeof options.port, kPipeTimeoutMs), "no port");
    }
    auto comm = backend.make(options);
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
                                          std::chrono::milliseconds timeout = 20s,
                                          const Backend& backend = shm_backend(true)) {
  std::vector<int> fds;
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int rank = 0; rank < size; ++rank) {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pair[0]);
      ::_exit(child_main(rank, size, pair[1], timeout, backend, body));  // never back into gtest
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
    children[std::size_t(rank)]->wait(20s * libai::testing::kTimeScale);
    ::close(fds[std::size_t(rank)]);
  }
  return reports;
}

// Runs `blocked` (a call waiting on a peer that never answers) while another thread calls
// abort(reason) after `delay`: `blocked` must throw CommunicationError naming the reason
// within 200 ms of the abort.
inline void require_abort_wakes(const std::function<void()>& blocked,
                                const std::function<void(const std::string&)>& abort,
                                const std::string& reason, std::chrono::milliseconds delay) {
  std::int64_t aborted_at = 0;
  std::thread control([&] {
    std::this_thread::sleep_for(delay);
    aborted_at = now_ns();
    abort(reason);
  });
  std::string message = "no error";
  try {
    blocked();
  } catch (const CommunicationError& e) {
    message = e.what();
  }
  const std::int64_t woke_at = now_ns();
  control.join();
  require(message.find(reason) != std::string::npos, "message: ", message);
  require(woke_at - aborted_at < 200'000'000, "woke ", (woke_at - aborted_at) / 1000,
          " us after the abort");
}

inline void expect_all_ok(const std::vector<std::string>& reports) {
  for (std::size_t r = 0; r < reports.size(); ++r) EXPECT_EQ(reports[r], "ok") << "rank " << r;
}

}  // namespace libai::comm::forked_ranks
