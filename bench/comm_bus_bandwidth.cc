// Bus bandwidth of a communicator's all-reduce and all-gather over 2 and 4 processes on this
// host (forked; `--backend ucx`: UCX over loopback, `--backend shm`: shared memory), beside
// the memcpy bound measured in the same run, size by size: every rank copies `bytes` at the
// same time (n processes share the memory system and the cores, so that is the honest bound).
//
//   bus bandwidth = bytes * 2(n-1)/n / time   (all-reduce of `bytes`)
//                 = bytes * (n-1)/n / time    (all-gather into `bytes`)
// the traffic each rank's link carries in a bandwidth-optimal algorithm, so it compares
// directly with one memcpy of `bytes` (read + write of the same bytes on one core). A third
// row gives the transport alone: rank 0 sends `bytes` to rank 1 (bytes / time, timed on the
// receiver), the ceiling a collective's every link runs into. With the shm backend a fourth
// row is the message plane one way (runtime/comm/message_plane.h): rank 0 sends `reps`
// messages of `bytes` to rank 1, whose handler reads each into a buffer of its own; bytes x
// reps / time until the last is read.
//
//   build/bench/bench_comm_bus_bandwidth [--backend ucx|shm] [--ranks 2,4] [--min-bytes 1024]
//                                        [--max-bytes 268435456]
//
// Each figure is the median of 3 timed blocks after a warm-up; a block is `reps` operations
// back to back (many for small sizes, 1 at 256 MB), started together after a barrier.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <atomic>
#include <thread>

#include "runtime/comm/message_plane.h"
#include "runtime/comm/shm_communicator.h"
#include "runtime/comm/ucx_communicator.h"

namespace libai::comm {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string backend = "ucx";
  std::vector<int> ranks{2, 4};
  std::size_t min_bytes = 1u << 10;
  std::size_t max_bytes = 256u << 20;
};

int reps_for(std::size_t bytes) {
  return int(std::clamp<std::size_t>((64u << 20) / bytes, 1, 200));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of fn, the median of 3 blocks of `reps` calls after one warm-up block
// (sized to about a tenth of a block, at least one call). `sync` runs before each block.
template <typename Fn, typename Sync>
double time_per_call(int reps, Fn&& fn, Sync&& sync) {
  for (int i = 0; i < std::max(1, reps / 10); ++i) fn();
  std::vector<double> blocks;
  for (int block = 0; block < 3; ++block) {
    sync();
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i) fn();
    blocks.push_back(std::chrono::duration<double>(Clock::now() - start).count() / reps);
  }
  return median(blocks);
}

std::string human(std::size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MB";
  return std::to_string(bytes >> 10) + " KB";
}

// Seconds per message of `bytes` from rank 0 to rank 1 over the plane, timed on rank 1 from
// the barrier to the last byte read (median of 3 blocks of `reps`, after a warm-up message).
double plane_one_way(Communicator& comm, MessagePlane& plane, std::size_t bytes, int reps,
                     std::atomic<int>& received) {
  std::vector<std::uint8_t> payload(bytes, 7);
  const ConstBlock block{payload.data(), bytes};
  std::vector<double> blocks;
  for (int round = 0; round < 4; ++round) {
    const int count = round == 0 ? 1 : reps;
    received.store(0);
    comm.barrier();
    const auto start = Clock::now();
    if (comm.rank() == 0) {
      for (int i = 0; i < count; ++i) plane.send(1, 0, {}, {&block, 1});
    }
    if (comm.rank() == 1) {
      while (received.load(std::memory_order_acquire) < count) std::this_thread::yield();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / count;
    if (round > 0) blocks.push_back(seconds);
  }
  comm.barrier();
  return median(blocks);
}

void run_rank(Communicator& comm, const Options& options) {
  const int n = comm.size();
  const bool report = comm.rank() == 0;
  // The message plane rows (shm only: the ucx plane is make_p2p_message_plane's).
  std::shared_ptr<MessagePlane> plane;
  std::atomic<int> received{0};
  std::vector<std::uint8_t> sink;
  if (options.backend == "shm") {
    plane = make_shm_message_plane(comm, std::chrono::seconds(120));
    sink.resize(options.max_bytes);
    plane->start(
        [&](IncomingMessage& m) {
          m.read(sink.data(), m.payload_bytes());
          received.fetch_add(1, std::memory_order_release);
        },
        [](const std::string& error) { std::fprintf(stderr, "plane: %s\n", error.c_str()); });
  }
  if (report) {
    std::printf(
        "\n%s, %d ranks\n| bytes | op | time (us) | bus GB/s | memcpy GB/s (all ranks) | bus / "
        "memcpy |\n|---:|---|---:|---:|---:|---:|\n",
        options.backend.c_str(), n);
  }
  for (std::size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
    const std::int64_t count = std::int64_t(bytes / 4);  // f32
    const int reps = reps_for(bytes);
    // memcpy on every rank at once: the bound when n processes share memory and cores.
    double copy = 0;
    {
      std::vector<char> from(bytes, 1), to(bytes, 0);
      copy = time_per_call(
          reps,
          [&] {
            std::memcpy(to.data(), from.data(), bytes);
            asm volatile("" : : "r"(to.data()) : "memory");
          },
          [&] { comm.barrier(); });
    }
    Tensor reduced = Tensor::ones({count});
    const double reduce = time_per_call(
        reps, [&] { comm.all_reduce(reduced); }, [&] { comm.barrier(); });
    Tensor part = Tensor::ones({count / n});
    Tensor gathered = Tensor::empty({count / n * n});
    const double gather = time_per_call(
        reps, [&] { comm.all_gather(part, gathered); }, [&] { comm.barrier(); });
    // The transport alone: rank 0 sends `bytes` to rank 1, timed on the receiver.
    Tensor message = Tensor::ones({count});
    double send = time_per_call(
        reps,
        [&] {
          if (comm.rank() == 0) comm.send(message, 1);
          if (comm.rank() == 1) comm.recv(message, 0);
        },
        [&] { comm.barrier(); });
    double plane_time = 0;
    if (plane) plane_time = plane_one_way(comm, *plane, bytes, reps, received);
    Tensor measured = Tensor::full({2}, 0.0, DType::f64);
    if (comm.rank() == 1) {
      measured.data<double>()[0] = send;
      measured.data<double>()[1] = plane_time;
      comm.send(measured, 0, 1);
    }
    if (!report) continue;
    comm.recv(measured, 1, 1);
    send = measured.data<double>()[0];
    plane_time = measured.data<double>()[1];
    const double copy_gbs = double(bytes) / copy * 1e-9;
    const double reduce_bus = double(bytes) * 2 * (n - 1) / n / reduce * 1e-9;
    const double gather_bus = double(gathered.nbytes()) * (n - 1) / n / gather * 1e-9;
    std::printf("| %s | all_reduce | %.1f | %.2f | %.2f | %.2f |\n", human(bytes).c_str(),
                reduce * 1e6, reduce_bus, copy_gbs, reduce_bus / copy_gbs);
    std::printf("| %s | all_gather | %.1f | %.2f | %.2f | %.2f |\n", human(bytes).c_str(),
                gather * 1e6, gather_bus, copy_gbs, gather_bus / copy_gbs);
    const double send_gbs = double(bytes) / send * 1e-9;
    std::printf("| %s | send 0 -> 1 | %.1f | %.2f | %.2f | %.2f |\n", human(bytes).c_str(),
                send * 1e6, send_gbs, copy_gbs, send_gbs / copy_gbs);
    if (plane) {
      const double plane_gbs = double(bytes) / plane_time * 1e-9;
      std::printf("| %s | plane 0 -> 1 | %.1f | %.2f | %.2f | %.2f |\n", human(bytes).c_str(),
                  plane_time * 1e6, plane_gbs, copy_gbs, plane_gbs / copy_gbs);
    }
    std::fflush(stdout);
  }
  comm.barrier();
}

// Forks n ranks; rank 0 picks the port and the parent passes it on. Returns whether all
// ranks exited cleanly.
bool run_world(int n, const Options& options) {
  std::vector<int> fds;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return false;
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pair[0]);
      int code = 0;
      try {
        ProcessGroupOptions group;
        group.rank = rank;
        group.size = n;
        group.timeout = std::chrono::seconds(120);
        group.on_listening = [&](int port) { (void)!::write(pair[1], &port, sizeof port); };
        if (rank != 0 && ::read(pair[1], &group.port, sizeof group.port) != sizeof group.port) {
          ::_exit(3);
        }
        std::shared_ptr<Communicator> comm;
        if (options.backend == "shm") {
          comm = make_shm_communicator(group);
        } else {
          comm = make_ucx_communicator(group);
        }
        run_rank(*comm, options);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    ::close(pair[1]);
    fds.push_back(pair[0]);
    pids.push_back(pid);
  }
  int port = 0;
  bool ok = ::read(fds[0], &port, sizeof port) == sizeof port;
  for (int rank = 1; rank < n && ok; ++rank)
    ok = ::write(fds[std::size_t(rank)], &port, sizeof port) == sizeof port;
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  for (int fd : fds) ::close(fd);
  return ok;
}

std::vector<int> parse_list(const char* text) {
  std::vector<int> out;
  for (const char* p = text; *p != '\0';) {
    out.push_back(std::atoi(p));
    while (*p != '\0' && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

}  // namespace
}  // namespace libai::comm

int main(int argc, char** argv) {
  libai::comm::Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--backend") {
      options.backend = argv[i + 1];
    } else if (flag == "--ranks") {
      options.ranks = libai::comm::parse_list(argv[i + 1]);
    } else if (flag == "--min-bytes") {
      options.min_bytes = std::stoull(argv[i + 1]);
    } else if (flag == "--max-bytes") {
      options.max_bytes = std::stoull(argv[i + 1]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--backend ucx|shm] [--ranks 2,4] [--min-bytes B] [--max-bytes B]\n",
                   argv[0]);
      return 2;
    }
  }
  if (options.backend != "ucx" && options.backend != "shm") {
    std::fprintf(stderr, "--backend must be ucx or shm, got %s\n", options.backend.c_str());
    return 2;
  }
  std::printf("%s communicator bus bandwidth (f32), sizes %zu to %zu bytes\n",
              options.backend.c_str(), options.min_bytes, options.max_bytes);
  bool ok = true;
  for (int n : options.ranks) ok = libai::comm::run_world(n, options) && ok;
  return ok ? 0 : 1;
}
