#include "runtime/comm/spmd.h"

#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "runtime/comm/local_communicator.h"
#include "runtime/comm/shm_communicator.h"
#include "runtime/comm/ucx_communicator.h"
#include "runtime/error.h"

namespace libai::comm {
namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

void run_spmd_threads(int size, const std::function<void(Communicator&)>& body,
                      std::chrono::milliseconds timeout) {
  auto comms = LocalGroup::create(size, timeout);
  std::mutex mutex;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  threads.reserve(size_t(size));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(*comms[r]);
      } catch (...) {
        const std::exception_ptr error = std::current_exception();
        {
          // Recorded before the abort, so an error the abort causes elsewhere comes second.
          std::lock_guard<std::mutex> lock(mutex);
          if (!first_error) first_error = error;
        }
        LocalGroup::abort(*comms[r], str_cat("rank ", r, " failed: ", message_of(error)));
      }
    });
  }
  for (auto& t : threads) t.join();
  comms.clear();  // joins the communicators' workers (what is still queued fails fast once aborted)
  if (first_error) std::rethrow_exception(first_error);
}

namespace {

void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= size_t(w);
  }
}

std::string read_all(int fd) {
  std::string out;
  char buffer[4096];
  while (true) {
    const ssize_t r = ::read(fd, buffer, sizeof buffer);
    if (r <= 0) return out;
    out.append(buffer, size_t(r));
  }
}

[[noreturn]] void child_main(int rank, int size, int port_read, int port_write, int error_write,
                             const std::function<void(Communicator&)>& body,
                             std::chrono::milliseconds timeout, const std::string& backend) {
  int code = 0;
  try {
    UcxGroupOptions options;
    options.rank = rank;
    options.size = size;
    options.timeout = timeout;
    if (rank == 0) {
      options.on_listening = [&](int port) {
        for (int i = 1; i < size; ++i) write_all(port_write, &port, sizeof port);
      };
    } else {
      int port = 0;
      if (::read(port_read, &port, sizeof port) != ssize_t(sizeof port))
        throw Error(ErrorKind::communication, "rank 0 never reported its port");
      options.port = port;
    }
    auto comm = backend == "shm" ? make_shm_communicator(options) : make_ucx_communicator(options);
    body(*comm);
  } catch (const std::exception& e) {
    write_all(error_write, e.what(), std::strlen(e.what()));
    code = 1;
  } catch (...) {
    const char* what = "unknown exception";
    write_all(error_write, what, std::strlen(what));
    code = 1;
  }
  ::_exit(code);
}

}  // namespace

void run_spmd_processes(int size, const std::function<void(Communicator&)>& body,
                        std::chrono::milliseconds timeout, const std::string& backend) {
  LIBAI_CHECK(size >= 1, "run_spmd_processes: size ", size, " must be positive");
  LIBAI_CHECK(backend == "ucx" || backend == "shm", "run_spmd_processes: backend '", backend,
              "' is neither ucx nor shm");
  int port_pipe[2];
  LIBAI_CHECK_KIND(IoError, ::pipe(port_pipe) == 0, "run_spmd_processes: pipe: ", std::strerror(errno));
  std::vector<pid_t> children;
  std::vector<int> error_fds;
  for (int rank = 0; rank < size; ++rank) {
    int error_pipe[2];
    LIBAI_CHECK_KIND(IoError, ::pipe(error_pipe) == 0, "run_spmd_processes: pipe: ", std::strerror(errno));
    const pid_t pid = ::fork();
    LIBAI_CHECK_KIND(IoError, pid >= 0, "run_spmd_processes: fork: ", std::strerror(errno));
    if (pid == 0) {
      ::close(error_pipe[0]);
      child_main(rank, size, port_pipe[0], port_pipe[1], error_pipe[1], body, timeout, backend);
    }
    ::close(error_pipe[1]);
    children.push_back(pid);
    error_fds.push_back(error_pipe[0]);
  }
  ::close(port_pipe[0]);
  ::close(port_pipe[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(30);
  std::vector<int> status(size_t(size), 0);
  std::vector<bool> done(size_t(size), false);
  int remaining = size;
  bool killed = false;
  while (remaining > 0) {
    for (int r = 0; r < size; ++r) {
      if (done[r]) continue;
      if (::waitpid(children[r], &status[r], WNOHANG) == children[r]) {
        done[r] = true;
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (!killed && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < size; ++r)
        if (!done[r]) ::kill(children[r], SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::string failures;
  for (int r = 0; r < size; ++r) {
    std::string message = read_all(error_fds[r]);
    ::close(error_fds[r]);
    const bool ok = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
    if (ok) continue;
    if (message.empty())
      message = WIFSIGNALED(status[r]) ? str_cat("killed by signal ", WTERMSIG(status[r]),
                                               killed ? " (deadline passed)" : "")
                                       : str_cat("exited with status ", WEXITSTATUS(status[r]));
    failures += str_cat("\n  rank ", r, ": ", message);
  }
  if (!failures.empty())
    throw Error(ErrorKind::communication, str_cat("spmd processes failed:", failures));
}

}  // namespace libai::comm
