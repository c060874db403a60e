// The ucx communicator with real processes on loopback, no mocks: the test forks one child
// per rank; rank 0 picks a free port and the parent hands it to the others. Each child checks
// its results against values it computes itself (inputs are a function of (rank, index), so
// every rank knows every other rank's input) and reports one line back through a socketpair.
// Rendezvous failures run in-process, on threads.
#include "runtime/comm/ucx_communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <thread>

#include "runtime/comm/rendezvous.h"
#include "runtime/error.h"
#include "tests/common/child_process.h"

namespace libai::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::ChildProcess;
using testing::read_all;
using testing::write_all;

constexpr int kPipeTimeoutMs = 60000;

// A check that failed inside a child (not a library error).
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
template <typename... Args>
void require(bool ok, const Args&... args) {
  if (!ok) throw Failure(str_cat(args...));
}

std::int64_t now_ns() {  // CLOCK_MONOTONIC: comparable between the processes of one host
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void send_text(int fd, const std::string& text) {
  const auto size = std::uint32_t(text.size());
  write_all(fd, &size, 4) && write_all(fd, text.data(), text.size());
}

std::string recv_text(int fd) {
  std::uint32_t size = 0;
  if (!read_all(fd, &size, 4, kPipeTimeoutMs)) return "<no report>";
  std::string text(size, '\0');
  return read_all(fd, text.data(), size, kPipeTimeoutMs) ? text : "<truncated report>";
}

using Body = std::function<std::string(Communicator& comm, int report_fd)>;

int child_main(int rank, int size, int fd, std::chrono::milliseconds timeout, const Body& body) {
  std::string report;
  try {
    UcxGroupOptions options;
    options.rank = rank;
    options.size = size;
    options.timeout = timeout;
    if (rank == 0) {
      options.on_listening = [fd](int port) { send_text(fd, std::to_string(port)); };
    } else {
      require(read_all(fd, &options.port, sizeof options.port, kPipeTimeoutMs), "no port");
    }
    auto comm = make_ucx_communicator(options);
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
std::vector<std::string> run_ranks(int size, const Body& body,
                                   std::chrono::milliseconds timeout = 20s) {
  std::vector<int> fds;
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int rank = 0; rank < size; ++rank) {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pair[0]);
      ::_exit(child_main(rank, size, pair[1], timeout, body));  // never back into gtest
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

void expect_all_ok(const std::vector<std::string>& reports) {
  for (std::size_t r = 0; r < reports.size(); ++r) EXPECT_EQ(reports[r], "ok") << "rank " << r;
}

// Rank r's input element i: multiples of 1/4 in [-2, 2], exact in bf16 and f16, and so are
// their sums over at most 4 ranks, in any order: every result can be compared exactly.
double input(int rank, std::int64_t i) { return double((rank * 7 + i * 3) % 17 - 8) * 0.25; }

Tensor filled(DType dtype, std::int64_t count, const std::function<double(std::int64_t)>& value) {
  std::vector<double> values(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) values[std::size_t(i)] = value(i);
  Tensor t = Tensor::empty({count}, dtype);
  t.copy_from(Tensor::from_vector(values));
  return t;
}

void require_values(const Tensor& t, const std::function<double(std::int64_t)>& expected,
                    const std::string& what) {
  const std::vector<double> got = t.to_vector<double>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    require(got[i] == expected(std::int64_t(i)), what, ": element ", i, " is ", got[i],
            ", expected ", expected(std::int64_t(i)));
  }
}

double reduce_over_ranks(int size, ReduceOp op, const std::function<double(int)>& of_rank) {
  double acc = of_rank(0);
  for (int q = 1; q < size; ++q) {
    const double v = of_rank(q);
    acc = op == ReduceOp::sum ? acc + v : op == ReduceOp::max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

// Every collective, four dtypes, sizes from 1 element across the direct/ring threshold to MBs.
std::string every_collective(Communicator& comm, int) {
  const int n = comm.size(), r = comm.rank();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (std::int64_t count : {1, 7, 1000, 40000, dtype == DType::f32 ? 1000003 : 300001}) {
      const std::string at = str_cat(dtype_name(dtype), " x ", count);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        if (op != ReduceOp::sum && count > 40000) continue;
        Tensor t = filled(dtype, count, [&](std::int64_t i) { return input(r, i); });
        comm.all_reduce(t, op);
        require_values(
            t,
            [&](std::int64_t i) {
              return reduce_over_ranks(n, op, [&](int q) { return input(q, i); });
            },
            str_cat("all_reduce(", reduce_op_name(op), ") ", at));
      }
      Tensor mine = filled(dtype, count, [&](std::int64_t i) { return input(r, i); });
      Tensor gathered = Tensor::zeros({n * count}, dtype);
      comm.all_gather(mine, gathered);
      require_values(
          gathered, [&](std::int64_t i) { return input(int(i / count), i % count); },
          "all_gather " + at);
      Tensor blocks = filled(dtype, n * count, [&](std::int64_t i) { return input(r, i); });
      Tensor block = Tensor::zeros({count}, dtype);
      comm.reduce_scatter(blocks, block);
      require_values(
          block,
          [&](std::int64_t i) {
            return reduce_over_ranks(n, ReduceOp::sum,
                                     [&](int q) { return input(q, r * count + i); });
          },
          "reduce_scatter " + at);
      const int root = int(count % n);
      Tensor b =
          filled(dtype, count, [&](std::int64_t i) { return r == root ? input(r, i) : -9.0; });
      comm.broadcast(b, root);
      require_values(
          b, [&](std::int64_t i) { return input(root, i); }, "broadcast " + at);
    }
  }
  const CommStats stats = comm.stats();
  require(stats.all_reduce_calls == 4 * 13 && stats.broadcast_calls == 20 &&
              stats.all_gather_elements == n * 3 * (41008 + 300001) + n * (41008 + 1000003),
          "stats: ", stats.all_reduce_calls, " all_reduce calls, ", stats.all_gather_elements,
          " gathered elements");
  comm.barrier();
  return "ok";
}

TEST(UcxCommunicator_Dist, EveryCollectiveOnTwoRanks) {
  expect_all_ok(run_ranks(2, every_collective));
}
TEST(UcxCommunicator_Dist, EveryCollectiveOnFourRanks) {
  expect_all_ok(run_ranks(4, every_collective));
}

// The ring all-reduce puts 2(n-1)/n of the tensor on the wire, the minimum.
TEST(UcxCommunicator_Dist, RingAllReduceSendsTheMinimumBytes) {
  expect_all_ok(run_ranks(4, [](Communicator& comm, int) {
    Tensor t = Tensor::ones({1 << 20});
    comm.all_reduce(t);
    require(comm.stats().bytes_sent == 2 * 3 * (4 << 20) / 4, "bytes sent ",
            comm.stats().bytes_sent);
    require(t.to_vector<float>()[12345] == 4.0f, "sum");
    return std::string("ok");
  }));
}

// Sub-groups share the connections; their messages never mix with the world's or each other's.
TEST(UcxCommunicator_Dist, NewGroupsRunBesideTheWorld) {
  expect_all_ok(run_ranks(4, [](Communicator& world, int) {
    const int r = world.rank();
    auto low = world.new_group({0, 1});
    auto high = world.new_group({2, 3});
    auto evens = world.new_group({0, 2});
    auto pair = r < 2 ? low : high;
    require(pair && pair->size() == 2 && pair->rank() == r % 2 && (r < 2) == (high == nullptr),
            "pair groups");
    require((r % 2 == 0) == (evens != nullptr), "evens membership");
    Tensor in_world = Tensor::full({100000}, r + 1.0);
    Tensor in_pair = Tensor::full({5000}, r + 1.0);
    Tensor in_evens = Tensor::full({300}, r + 1.0);
    WorkHandle a = world.all_reduce_async(in_world);
    WorkHandle b = pair->all_reduce_async(in_pair);
    WorkHandle c = evens ? evens->all_reduce_async(in_evens) : nullptr;
    a->wait(), b->wait();
    if (c) c->wait();
    require(in_world.to_vector<float>()[99999] == 10.0f, "world sum");
    require(in_pair.to_vector<float>()[0] == (r < 2 ? 3.0f : 7.0f), "pair sum");
    require(!evens || in_evens.to_vector<float>()[7] == 4.0f, "evens sum");
    auto single = pair->new_group({1});  // nested, called by the pair's ranks only
    require((single != nullptr) == (pair->rank() == 1), "single membership");
    if (single) {
      Tensor t = Tensor::full({3}, 5.0);
      single->all_reduce(t);
      require(t.to_vector<float>()[2] == 5.0f && single->size() == 1, "single-rank group");
    }
    auto again = world.new_group({1, 2, 3});  // ids stay distinct after the nested call
    if (again) {
      Tensor t = Tensor::full({70000}, 1.0);
      again->all_reduce(t);
      require(t.to_vector<float>()[69999] == 3.0f, "group of three");
    }
    require(world.stats().all_reduce_calls == 1 && pair->stats().all_reduce_calls == 1,
            "stats are per group");
    world.barrier();
    return std::string("ok");
  }));
}

// *_async returns at once; the background thread overlaps with the caller's compute. Point to
// point posts without blocking the queue, so both ranks may send before they receive.
TEST(UcxCommunicator_Dist, AsyncOperationsOverlapAndPointToPointDoesNotDeadlock) {
  expect_all_ok(run_ranks(2, [](Communicator& comm, int) {
    const int r = comm.rank(), other = 1 - r;
    std::vector<Tensor> tensors;
    std::vector<WorkHandle> works;
    for (int k = 0; k < 4; ++k) {
      tensors.push_back(Tensor::full({1 << 19}, double(k + r)));
      works.push_back(comm.all_reduce_async(tensors.back()));
    }
    double compute = 0;  // the caller's own work meanwhile
    for (int i = 0; i < 2000000; ++i) compute += 1e-9 * i;
    for (int k = 0; k < 4; ++k) {
      works[std::size_t(k)]->wait();
      require(works[std::size_t(k)]->completed() &&
                  tensors[std::size_t(k)].to_vector<float>()[77] == float(2 * k + 1),
              "async all_reduce ", k);
    }
    Tensor out = Tensor::full({1 << 20}, double(r + 10));  // rendezvous-sized
    Tensor in = Tensor::zeros({1 << 20});
    Tensor small_out = Tensor::full({4}, double(r)), small_in = Tensor::zeros({4});
    WorkHandle sent = comm.send_async(out, other, 7);
    WorkHandle sent_small = comm.send_async(small_out, other, 7);
    comm.recv(in, other, 7);        // the first message of (other, tag 7)...
    comm.recv(small_in, other, 7);  // ...then the second: in order
    sent->wait(), sent_small->wait();
    require(in.to_vector<float>()[1 << 19] == float(other + 10), "send/recv payload");
    require(small_in.to_vector<float>()[3] == float(other) && compute > 0, "in-order matching");
    require(comm.stats().send_calls == 2 && comm.stats().recv_calls == 2, "p2p stats");
    comm.barrier();
    return std::string("ok");
  }));
}

// Small (direct) and large (ring) collectives alike: the data may already be on its way, but
// the headers are checked before anything is trusted.
TEST(UcxCommunicator_Dist, MismatchedCountsFailOnEveryRankNamingThem) {
  for (const std::int64_t count : {10, 300000}) {
    const auto reports = run_ranks(3, [count](Communicator& comm, int) {
      Tensor t = Tensor::ones({comm.rank() == 1 ? count + 1 : count});
      try {
        comm.all_reduce(t);
        return std::string("FAILED: no error");
      } catch (const CommunicationError& e) {
        const std::string message = e.what();
        bool later_throws = false;
        try {
          comm.all_reduce_async(t);
        } catch (const CommunicationError&) {
          later_throws = true;
        }
        require(later_throws, "a call after the error did not throw");
        return message;
      }
    });
    for (const std::string& message : reports) {
      EXPECT_NE(message.find("ucx all_reduce #0"), std::string::npos) << message;
      for (int r = 0; r < 3; ++r) {
        const std::string rank_count =
            str_cat("rank ", r, ": all_reduce(sum) of ", r == 1 ? count + 1 : count, " f32");
        EXPECT_NE(message.find(rank_count), std::string::npos) << message;
      }
    }
  }
}

// Rank 2 dies (SIGKILL) while 4 MB all-reduces are in flight; every other rank fails naming it,
// long before the 30 s timeout.
TEST(UcxCommunicator_Dist, KilledRankFailsTheOthersNamingIt) {
  const auto reports = run_ranks(
      4,
      [](Communicator& comm, int fd) {
        Tensor t = Tensor::ones({1 << 20});
        for (int iteration = 0;; ++iteration) {
          WorkHandle w = comm.all_reduce_async(t);
          if (comm.rank() == 2 && iteration == 3) {
            std::this_thread::sleep_for(2ms);  // the collective is under way
            send_text(fd, str_cat("killed at ", now_ns()));
            ::raise(SIGKILL);
          }
          try {
            w->wait();
          } catch (const CommunicationError& e) {
            return str_cat(now_ns(), " ", e.what());
          }
        }
      },
      30s);
  ASSERT_EQ(reports[2].rfind("killed at ", 0), 0u) << reports[2];
  const std::int64_t killed = std::stoll(reports[2].substr(10));
  for (int r : {0, 1, 3}) {
    const std::string& report = reports[std::size_t(r)];
    const double seconds = double(std::stoll(report) - killed) * 1e-9;
    EXPECT_LT(seconds, 10.0) << report;
    EXPECT_NE(report.find("rank 2"), std::string::npos) << report;
    std::printf("rank %d noticed the death of rank 2 after %.3f s: %s\n", r, seconds,
                report.substr(report.find(' ') + 1).c_str());
  }
}

TEST(UcxCommunicator_Dist, RankThatNeverCallsTimesOutNamingIt) {
  const auto reports = run_ranks(
      2,
      [](Communicator& comm, int) {
        if (comm.rank() == 1) {  // alive, but skips the collective
          std::this_thread::sleep_for(2s);
          return std::string("ok");
        }
        Tensor t = Tensor::ones({8});
        const auto start = Clock::now();
        try {
          comm.all_reduce(t);
        } catch (const CommunicationError& e) {
          require(Clock::now() - start < 5s, "took too long");
          return std::string(e.what());
        }
        return std::string("FAILED: no error");
      },
      800ms);
  EXPECT_NE(reports[0].find("timed out after 800 ms waiting for rank 1"), std::string::npos)
      << reports[0];
}

// abort() from another thread (the control plane saw a node hang) ends a wait on a peer that
// never answers at once, with the reason; later calls throw.
TEST(UcxCommunicator_Dist, AbortFromAnotherThreadWakesAWait) {
  const auto reports = run_ranks(2, [](Communicator& comm, int) {
    if (comm.rank() == 1) {  // alive, but skips the collective
      std::this_thread::sleep_for(1500ms);
      return std::string("ok");
    }
    Tensor t = Tensor::ones({1 << 18});
    WorkHandle w = comm.all_reduce_async(t);
    std::int64_t aborted_at = 0;
    std::thread control([&] {
      std::this_thread::sleep_for(300ms);
      aborted_at = now_ns();
      comm.abort("control plane: node 1 hangs");
    });
    std::string message = "FAILED: no error";
    try {
      w->wait();
    } catch (const CommunicationError& e) {
      message = e.what();
    }
    const std::int64_t woke_at = now_ns();
    control.join();
    require(message.find("control plane: node 1 hangs") != std::string::npos, "message: ", message);
    require(woke_at - aborted_at < 200'000'000, "woke ", (woke_at - aborted_at) / 1000, " us late");
    try {
      comm.barrier();
    } catch (const CommunicationError&) {
      return std::string("ok");
    }
    return std::string("FAILED: a call after abort did not throw");
  });
  EXPECT_EQ(reports[0], "ok");
}

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

}  // namespace
}  // namespace libai::comm
