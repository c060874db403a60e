// Helpers for tests that run several real processes on loopback: a forked child that is
// always reaped (never an orphan), and socket I/O with deadlines so that a dead peer fails a
// test instead of blocking it.
//
//   int fds[2];
//   ::socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
//   pid_t pid = ::fork();
//   if (pid == 0) { ...; ::_exit(0); }
//   testing::ChildProcess child(pid);
//   ASSERT_TRUE(testing::read_all(fds[0], &port, sizeof port, 20000));
//   EXPECT_EQ(child.wait(std::chrono::seconds(10)), 0);
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>

namespace libai::testing {

inline bool write_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

inline bool read_all(int fd, void* data, std::size_t size, int timeout_ms) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return false;
    ssize_t n = ::read(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Owns a forked child: wait() reaps it with a deadline; the destructor kills and reaps it if
// the test ended early.
class ChildProcess {
 public:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  ~ChildProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The exit code, or -1 if it did not exit normally in time (the destructor then kills it).
  int wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_;
};

// Runs fn in a forked child and returns its exit code (0: fn returned; 1: it threw, with the
// message on stderr). Tests that fork SPMD ranks call it first, so the test process itself
// starts no compute threads before forking.
inline int run_in_child(const std::function<void()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 0;
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child failed: %s\n", e.what());
      code = 1;
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace libai::testing
