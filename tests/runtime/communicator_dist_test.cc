// The process-group communicators (ucx over loopback, shm through this host's memory) with
// real processes, no mocks: one suite of cases, instantiated per backend (Ucx, ShmCma,
// ShmStaged: shm with cross-memory attach and staged, the path of hosts that refuse CMA). The
// test forks one child per rank (tests/common/forked_ranks.h); each child checks its results
// against values it computes itself (inputs are a function of (rank, index), so every rank
// knows every other rank's input) and reports one line back through a socketpair.
#include "runtime/comm/shm_communicator.h"
#include "runtime/comm/ucx_communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "runtime/comm/shm_transport.h"
#include "runtime/error.h"
#include "tests/common/child_process.h"
#include "tests/common/forked_ranks.h"

namespace libai::comm {
namespace {

using namespace forked_ranks;

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

// Every collective, four dtypes, sizes from 1 element across the backends' small/large
// thresholds (64 KiB per rank) to MBs (`large` f32 elements).
std::string every_collective(Communicator& comm, std::int64_t large) {
  const int n = comm.size(), r = comm.rank();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (std::int64_t count : {std::int64_t(1), std::int64_t(7), std::int64_t(1000),
                               std::int64_t(40000), dtype == DType::f32 ? large : 300001}) {
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
              stats.all_gather_elements == n * 3 * (41008 + 300001) + n * (41008 + large),
          "stats: ", stats.all_reduce_calls, " all_reduce calls, ", stats.all_gather_elements,
          " gathered elements");
  comm.barrier();
  return "ok";
}

// Segments named libai-* in /dev/shm now.
std::set<std::string> shm_entries() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("libai-", 0) == 0) names.insert(name);
  }
  return names;
}

// Entries new since `before` that are still there 300 ms later: a leaked segment stays, while
// one of another job running beside this test (ctest -j) is unlinked within milliseconds.
std::set<std::string> new_entries(const std::set<std::string>& before) {
  const auto added = [&] {
    std::set<std::string> names;
    for (const std::string& name : shm_entries())
      if (!before.count(name)) names.insert(name);
    return names;
  };
  const std::set<std::string> first = added();
  if (first.empty()) return first;
  std::this_thread::sleep_for(300ms);
  std::set<std::string> kept;
  for (const std::string& name : added())
    if (first.count(name)) kept.insert(name);
  return kept;
}

// The project's segments this process maps, and those of them whose names are still in
// /dev/shm (/proc/self/maps marks an unlinked file "(deleted)"): exact for this process,
// whatever other jobs do beside it.
struct MappedSegments {
  int mapped = 0;
  std::set<std::string> still_named;
};
MappedSegments mapped_segments() {
  MappedSegments out;
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> seen;
  for (std::string line; std::getline(maps, line);) {
    const auto at = line.find("/dev/shm/libai-");
    if (at == std::string::npos) continue;
    const bool deleted = line.size() >= 10 && line.compare(line.size() - 10, 10, " (deleted)") == 0;
    std::string name = line.substr(at + 9);
    if (deleted) name.resize(name.size() - 10);
    if (!seen.insert(name).second) continue;
    ++out.mapped;
    if (!deleted) out.still_named.insert(name);
  }
  return out;
}

// Whether this host lets a process read a child's memory (a container's seccomp filter may
// refuse process_vm_readv): the CMA variants need it, the staged ones run everywhere.
bool host_allows_cross_memory_attach() {
  static const std::uint64_t word = 0x5eed1234abcd9876ull;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return false;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pair[0]);
    char byte = 0;
    (void)!::read(pair[1], &byte, 1);  // until the parent is done (or gone)
    ::_exit(0);
  }
  ChildProcess child(pid);
  const bool ok = shm::cma_probe({std::int32_t(pid), 0}, reinterpret_cast<std::uint64_t>(&word),
                                 &word, sizeof word);
  ::close(pair[0]);
  ::close(pair[1]);
  child.wait(5s);
  return ok;
}

// A backend under test and what differs between the backends by design.
struct Case {
  Backend backend;
  std::int64_t large_count;        // every_collective's largest f32 tensor
  std::int64_t all_reduce_factor;  // bytes_sent of an all_reduce: factor (n-1)/n x the tensor
  double death_noticed_within;     // seconds: a killed rank fails the others within this
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Backend& b = info.param.backend;
  return b.name == "ucx" ? "Ucx" : b.cross_memory_attach ? "ShmCma" : "ShmStaged";
}

// Ring all-reduce (ucx) sends 2(n-1)/n of the tensor; shm's rank r reduces slice r and writes
// it into the n-1 others, (n-1)/n of the tensor.
const Case kUcx{ucx_backend(), 1000003, 2, 10.0};
const Case kShmCma{shm_backend(true), 2500003, 1, 3.0};
const Case kShmStaged{shm_backend(false), 2500003, 1, 3.0};

class Communicator_Dist : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    static const bool allowed = host_allows_cross_memory_attach();
    if (GetParam().backend.cross_memory_attach && !allowed)
      GTEST_SKIP() << "this host refuses process_vm_readv: the staged variant covers it";
  }
  bool is_shm() const { return GetParam().backend.name == "shm"; }
  std::vector<std::string> run(int size, const Body& body, std::chrono::milliseconds timeout = 20s) {
    return run_ranks(size, body, timeout, GetParam().backend);
  }
};

// shm only: what the segments leave in /dev/shm.
class ShmCommunicator_Dist : public Communicator_Dist {};
// Failures do not depend on how shm moves the data: CMA (or staged where CMA is refused) only.
class CommunicatorFaults_Dist : public Communicator_Dist {};

TEST_P(Communicator_Dist, EveryCollectiveOnTwoRanks) {
  const auto before = shm_entries();
  const std::int64_t large = GetParam().large_count;
  expect_all_ok(run(2, [large](Communicator& comm, int) { return every_collective(comm, large); }));
  if (is_shm()) {
    EXPECT_TRUE(new_entries(before).empty()) << *new_entries(before).begin();
  }
}

TEST_P(Communicator_Dist, EveryCollectiveOnFourRanks) {
  const std::int64_t large = GetParam().large_count;
  expect_all_ok(run(4, [large](Communicator& comm, int) { return every_collective(comm, large); }));
}

TEST_P(Communicator_Dist, AllReduceCountsTheBytesItSends) {
  const std::int64_t factor = GetParam().all_reduce_factor;
  expect_all_ok(run(4, [factor](Communicator& comm, int) {
    Tensor t = Tensor::ones({1 << 20});
    comm.all_reduce(t);
    require(comm.stats().bytes_sent == factor * 3 * (4 << 20) / 4, "bytes sent ",
            comm.stats().bytes_sent);
    require(t.to_vector<float>()[12345] == 4.0f, "sum");
    return std::string("ok");
  }));
}

// The segments are unlinked once every rank attached: none is left while the job still runs.
TEST_P(ShmCommunicator_Dist, SegmentsAreGoneOnceEveryRankAttached) {
  expect_all_ok(run_ranks(
      3,
      [&](Communicator& comm, int) {
        comm.barrier();
        const MappedSegments segments = mapped_segments();
        require(segments.mapped > 0, "this rank maps no segment of the project");
        require(segments.still_named.empty(), "segment ",
                segments.still_named.empty() ? "" : *segments.still_named.begin(), " still named");
        comm.barrier();
        return std::string("ok");
      },
      20s, GetParam().backend));
}

// Sub-groups share the connections or segments; their messages never mix with the world's
// or each other's.
TEST_P(Communicator_Dist, NewGroupsRunBesideTheWorld) {
  expect_all_ok(run(
      4,
      [](Communicator& world, int) {
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
        Tensor in_evens = Tensor::full({300000}, r + 1.0);
        WorkHandle a = world.all_reduce_async(in_world);
        WorkHandle b = pair->all_reduce_async(in_pair);
        WorkHandle c = evens ? evens->all_reduce_async(in_evens) : nullptr;
        a->wait(), b->wait();
        if (c) c->wait();
        require(in_world.to_vector<float>()[99999] == 10.0f, "world sum");
        require(in_pair.to_vector<float>()[0] == (r < 2 ? 3.0f : 7.0f), "pair sum");
        require(!evens || in_evens.to_vector<float>()[299999] == 4.0f, "evens sum");
        // Point to point inside a group: group ranks, its own (group, tag) space.
        Tensor to_partner = Tensor::full({3}, 100.0 + r), from_partner = Tensor::zeros({3});
        WorkHandle sent = pair->send_async(to_partner, 1 - pair->rank(), 5);
        pair->recv(from_partner, 1 - pair->rank(), 5);
        sent->wait();
        require(from_partner.to_vector<float>()[2] == float(100 + (r ^ 1)), "pair send/recv");
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

// *_async returns at once; the operations thread overlaps with the caller's compute. Point to
// point progresses in the background: both ranks send 12 MB (many times shm's ring, above
// ucx's rendezvous size) before receiving, and tags are received in another order than sent.
TEST_P(Communicator_Dist, AsyncOperationsOverlapAndPointToPointDoesNotDeadlock) {
  expect_all_ok(run(2, [](Communicator& comm, int) {
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
    Tensor out = filled(DType::f32, 3 << 20, [&](std::int64_t i) { return input(r, i); });
    Tensor in = Tensor::zeros({3 << 20});
    Tensor small_out = Tensor::full({4}, double(r)), small_in = Tensor::zeros({4});
    Tensor tagged_out = Tensor::full({10}, 50.0 + r), tagged_in = Tensor::zeros({10});
    WorkHandle sent = comm.send_async(out, other, 7);  // 12 MB: many times the ring
    WorkHandle sent_small = comm.send_async(small_out, other, 7);
    WorkHandle sent_tagged = comm.send_async(tagged_out, other, 9);
    comm.recv(tagged_in, other, 9);  // tag 9 first: the tag 7 messages wait aside
    comm.recv(in, other, 7);         // the first message of (other, tag 7)...
    comm.recv(small_in, other, 7);   // ...then the second: in order
    sent->wait(), sent_small->wait(), sent_tagged->wait();
    require_values(in, [&](std::int64_t i) { return input(other, i); }, "12 MB send/recv");
    require(small_in.to_vector<float>()[3] == float(other) && compute > 0, "in-order matching");
    require(tagged_in.to_vector<float>()[9] == float(50 + other), "tag 9");
    require(comm.stats().send_calls == 3 && comm.stats().recv_calls == 3, "p2p stats");
    comm.barrier();
    return std::string("ok");
  }));
}

// Small and large collectives alike: the data may already be on its way (ucx), but the headers
// are checked before anything is trusted.
TEST_P(CommunicatorFaults_Dist, MismatchedCountsFailOnEveryRankNamingThem) {
  for (const std::int64_t count : {10, 300000}) {
    const auto reports = run(3, [count](Communicator& comm, int) {
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
      EXPECT_NE(message.find(GetParam().backend.name + " all_reduce #0"), std::string::npos)
          << message;
      for (int r = 0; r < 3; ++r) {
        const std::string rank_count =
            str_cat("rank ", r, ": all_reduce(sum) of ", r == 1 ? count + 1 : count, " f32");
        EXPECT_NE(message.find(rank_count), std::string::npos) << message;
      }
    }
  }
}

// Rank 2 dies (SIGKILL) while 4 MB all-reduces are in flight: every other rank fails naming it
// within seconds (the timeout is 30 s), and (shm) the killed job leaves no segment behind.
TEST_P(CommunicatorFaults_Dist, KilledRankFailsTheOthersNamingIt) {
  const auto before = shm_entries();
  const auto reports = run(
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
    EXPECT_LT(seconds, GetParam().death_noticed_within) << report;
    EXPECT_NE(report.find("rank 2"), std::string::npos) << report;
    std::printf("rank %d noticed the death of rank 2 after %.3f s: %s\n", r, seconds,
                report.substr(report.find(' ') + 1).c_str());
  }
  if (is_shm()) {
    EXPECT_TRUE(new_entries(before).empty()) << *new_entries(before).begin();
  }
}

// Rank 1 answers nothing: shm stops it (SIGSTOP: alive, but silent), ucx lets it sleep (a
// stopped UCX peer would hold up the goodbye at teardown). Rank 0's wait ends the moment another
// thread calls abort(), with the reason; later calls throw it too.
TEST_P(CommunicatorFaults_Dist, AbortFromAnotherThreadWakesAWait) {
  const bool stop_peer = is_shm();
  const auto reports = run(2, [stop_peer](Communicator& comm, int) {
    Tensor pids = Tensor::zeros({2}, DType::f64);
    comm.all_gather(Tensor::full({1}, double(::getpid()), DType::f64), pids);
    if (comm.rank() == 1) {
      if (!stop_peer) {
        std::this_thread::sleep_for(1500ms);
        return std::string("ok");
      }
      ::raise(SIGSTOP);  // rank 0 kills it once done
      return std::string("FAILED: continued");
    }
    const auto peer = pid_t(pids.to_vector<double>()[1]);
    Tensor t = Tensor::ones({1 << 20});
    WorkHandle w = comm.all_reduce_async(t);
    require_abort_wakes([&] { w->wait(); },
                        [&](const std::string& reason) { comm.abort(reason); },
                        "control plane: node 1 stopped answering", 300ms);
    if (stop_peer) ::kill(peer, SIGKILL);
    try {
      comm.barrier();
      return std::string("FAILED: a call after abort did not throw");
    } catch (const CommunicationError&) {
    }
    return std::string("ok");
  });
  EXPECT_EQ(reports[0], "ok");
}

TEST_P(CommunicatorFaults_Dist, RankThatNeverCallsTimesOutNamingIt) {
  const auto reports = run(
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

INSTANTIATE_TEST_SUITE_P(Backends, Communicator_Dist,
                         ::testing::Values(kUcx, kShmCma, kShmStaged), case_name);
INSTANTIATE_TEST_SUITE_P(Backends, ShmCommunicator_Dist, ::testing::Values(kShmCma, kShmStaged),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorFaults_Dist, ::testing::Values(kUcx, kShmCma),
                         case_name);

}  // namespace
}  // namespace libai::comm
