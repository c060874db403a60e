// The local communicator against references computed serially here: every collective for 1 to
// 4 ranks in f32, f64 and bf16 (bit-exact: the reduction order over ranks is fixed), async
// overlap and ordering, subgroups, stats, and the errors (disagreeing ranks, a missing rank,
// a failing rank) that must reach every rank instead of hanging.
#include "runtime/comm/local_communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "runtime/comm/spmd.h"
#include "runtime/error.h"

namespace libai::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A rank's input: deterministic values in [-4, 4) with a fractional part.
double value(int rank, int64_t i, int salt) {
  uint64_t x = uint64_t(rank) * 0x9E3779B97F4A7C15ull + uint64_t(i) * 0xBF58476D1CE4E5B9ull +
               uint64_t(salt) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86897784Dull;
  x ^= x >> 29;
  return double(x % 8192) / 1024.0 - 4.0 + double(x >> 60) / 3.0;
}

Tensor make_input(int rank, int64_t n, DType dtype, int salt = 0) {
  std::vector<double> v(size_t(n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value(rank, i, salt);
  Tensor t = Tensor::empty({n}, dtype);
  t.copy_from(Tensor::from_vector<double>(v));
  return t;
}

double round_to(DType dtype, float x) {
  if (dtype == DType::bf16) return double(float(bf16(x)));
  if (dtype == DType::f16) return double(float(f16(x)));
  return double(x);
}

template <typename Acc>
Acc combine(ReduceOp op, Acc a, Acc b) {
  return op == ReduceOp::sum ? a + b : op == ReduceOp::max ? std::max(a, b) : std::min(a, b);
}

// op over the ranks' values, rank 0 first, in f64 for f64 and f32 (then rounded) otherwise.
std::vector<double> reference(const std::vector<std::vector<double>>& ranks, DType dtype,
                              ReduceOp op) {
  std::vector<double> out(ranks[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == DType::f64) {
      double acc = ranks[0][i];
      for (size_t r = 1; r < ranks.size(); ++r) acc = combine(op, acc, ranks[r][i]);
      out[i] = acc;
    } else {
      float acc = float(ranks[0][i]);
      for (size_t r = 1; r < ranks.size(); ++r) acc = combine(op, acc, float(ranks[r][i]));
      out[i] = round_to(dtype, acc);
    }
  }
  return out;
}

// Every rank's input as this rank would make it (each rank computes its own references).
std::vector<std::vector<double>> all_inputs(int size, int64_t n, DType dtype, int salt = 0) {
  std::vector<std::vector<double>> v;
  for (int r = 0; r < size; ++r) v.push_back(make_input(r, n, dtype, salt).to_vector<double>());
  return v;
}

std::vector<double> slice(const std::vector<double>& v, int64_t begin, int64_t n) {
  return {v.begin() + begin, v.begin() + begin + n};
}

class LocalCollectives : public ::testing::TestWithParam<std::tuple<int, DType>> {
 protected:
  int size() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
};

TEST_P(LocalCollectives, AllReduceMatchesTheSerialReduction) {
  const int64_t n = 2500;  // not a multiple of the ranks, and several 1024-element blocks
  run_spmd_threads(size(), [&](Communicator& comm) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      Tensor t = make_input(comm.rank(), n, dtype());
      comm.all_reduce(t, op);
      EXPECT_EQ(t.to_vector<double>(), reference(all_inputs(size(), n, dtype()), dtype(), op))
          << "rank " << comm.rank() << " " << reduce_op_name(op);
    }
  });
}

TEST_P(LocalCollectives, AllGatherConcatenatesInRankOrder) {
  const int64_t n = 37;
  run_spmd_threads(size(), [&](Communicator& comm) {
    std::vector<double> expected;
    for (const auto& v : all_inputs(size(), n, dtype()))
      expected.insert(expected.end(), v.begin(), v.end());
    Tensor out = Tensor::zeros({size() * n}, dtype());
    comm.all_gather(make_input(comm.rank(), n, dtype()), out);
    EXPECT_EQ(out.to_vector<double>(), expected) << "rank " << comm.rank();
    // In place: the input is this rank's block of the output.
    Tensor in_place = Tensor::zeros({size() * n}, dtype());
    Tensor block = in_place.as_strided({n}, {1}, comm.rank() * n);
    block.copy_from(make_input(comm.rank(), n, dtype()));
    comm.all_gather(block, in_place);
    EXPECT_EQ(in_place.to_vector<double>(), expected) << "rank " << comm.rank();
  });
}

TEST_P(LocalCollectives, ReduceScatterGivesEachRankItsBlock) {
  const int64_t block = 517;
  run_spmd_threads(size(), [&](Communicator& comm) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      auto full = reference(all_inputs(size(), size() * block, dtype()), dtype(), op);
      Tensor out = Tensor::zeros({block}, dtype());
      comm.reduce_scatter(make_input(comm.rank(), size() * block, dtype()), out, op);
      EXPECT_EQ(out.to_vector<double>(), slice(full, comm.rank() * block, block))
          << "rank " << comm.rank();
    }
  });
}

TEST_P(LocalCollectives, BroadcastCopiesTheRoot) {
  const int64_t n = 1500;
  run_spmd_threads(size(), [&](Communicator& comm) {
    for (int root = 0; root < size(); ++root) {
      Tensor t = make_input(comm.rank(), n, dtype(), root);
      comm.broadcast(t, root);
      EXPECT_EQ(t.to_vector<double>(), make_input(root, n, dtype(), root).to_vector<double>())
          << "rank " << comm.rank() << " root " << root;
    }
  });
}

TEST_P(LocalCollectives, SendRecvAroundARing) {
  const int64_t n = 100;
  run_spmd_threads(size(), [&](Communicator& comm) {
    const int next = (comm.rank() + 1) % size(), prev = (comm.rank() + size() - 1) % size();
    comm.send(make_input(comm.rank(), n, dtype()), next, /*tag=*/7);  // eager: no deadlock
    Tensor got = Tensor::zeros({n}, dtype());
    comm.recv(got, prev, /*tag=*/7);
    EXPECT_EQ(got.to_vector<double>(), make_input(prev, n, dtype()).to_vector<double>());
  });
}

INSTANTIATE_TEST_SUITE_P(Local, LocalCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DType::f32, DType::f64, DType::bf16)),
                         [](const auto& info) {
                           return str_cat(std::get<0>(info.param), "_ranks_",
                                          dtype_name(std::get<1>(info.param)));
                         });

TEST(LocalCollectivesMore, F16ReducesInF32AndRoundsOnce) {
  run_spmd_threads(3, [&](Communicator& comm) {
    Tensor t = make_input(comm.rank(), 300, DType::f16);
    comm.all_reduce(t);
    EXPECT_EQ(t.to_vector<double>(),
              reference(all_inputs(3, 300, DType::f16), DType::f16, ReduceOp::sum));
  });
}

TEST(LocalCollectivesMore, IntegersAreCopied) {
  run_spmd_threads(3, [&](Communicator& comm) {
    const int r = comm.rank();
    Tensor b = Tensor::from_vector<int64_t>({r, 10 * r, int64_t(1) << 40});
    comm.broadcast(b, 2);
    EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{2, 20, int64_t(1) << 40}));
    Tensor gathered = Tensor::zeros({6}, DType::i32);
    comm.all_gather(Tensor::from_vector<int32_t>({r, -r}), gathered);
    EXPECT_EQ(gathered.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 1, -1, 2, -2}));
    comm.send(Tensor::from_vector<uint8_t>({uint8_t(200 + r)}), (r + 1) % 3);
    Tensor got = Tensor::zeros({1}, DType::u8);
    comm.recv(got, (r + 2) % 3);
    EXPECT_EQ(got.to_vector<int>()[0], 200 + (r + 2) % 3);
    EXPECT_THROW(comm.all_reduce(b), InvalidArgument);  // reductions need a floating dtype
  });
}

TEST(LocalCollectivesMore, ResultsAreBitIdenticalAcrossRanksAndRuns) {
  std::vector<std::vector<float>> results(6);
  for (int run = 0; run < 2; ++run)
    run_spmd_threads(3, [&](Communicator& comm) {
      std::vector<float> v(4099);
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = float(value(comm.rank(), int64_t(i), 9) * 1e3 / 7);
      Tensor t = Tensor::from_vector(v);
      comm.all_reduce(t);
      results[size_t(run * 3 + comm.rank())] = t.to_vector<float>();
    });
  for (size_t k = 1; k < results.size(); ++k)
    EXPECT_EQ(std::memcmp(results[k].data(), results[0].data(), results[0].size() * 4), 0) << k;
}

TEST(LocalCollectivesMore, BarrierAndNames) {
  EXPECT_STREQ(reduce_op_name(ReduceOp::max), "max");
  std::atomic<int> arrived = 0;
  run_spmd_threads(3, [&](Communicator& comm) {
    EXPECT_STREQ(comm.backend(), "local");
    ++arrived;
    comm.barrier();
    EXPECT_EQ(arrived.load(), 3);  // nobody leaves the barrier before everyone came
  });
}

TEST(LocalAsync, AllReduceProgressesWhileTheCallerComputes) {
  // Rank 1 calls its all-reduce only after rank 0 started one asynchronously, and rank 0's
  // caller does not wait on the work until rank 1's all-reduce has returned: that can only
  // happen when rank 0's all-reduce runs in the background.
  std::promise<void> started, peer_done;
  const int64_t n = 1 << 20;
  run_spmd_threads(
      2,
      [&](Communicator& comm) {
        Tensor t = make_input(comm.rank(), n, DType::f32);
        if (comm.rank() == 0) {
          WorkHandle work = comm.all_reduce_async(t);
          started.set_value();
          // The caller's "compute": blocked elsewhere until rank 1 is done.
          ASSERT_EQ(peer_done.get_future().wait_for(20s), std::future_status::ready);
          work->wait();
        } else {
          started.get_future().wait();
          comm.all_reduce(t);
          peer_done.set_value();
        }
        EXPECT_EQ(t.to_vector<double>(),
                  reference(all_inputs(2, n, DType::f32), DType::f32, ReduceOp::sum));
      },
      10s);
}

TEST(LocalAsync, OutstandingOperationsRunInCallOrder) {
  run_spmd_threads(3, [&](Communicator& comm) {
    Tensor x = Tensor::full({5}, comm.rank() + 1.0);
    Tensor gathered = Tensor::zeros({15});
    std::vector<WorkHandle> works = {comm.all_reduce_async(x, ReduceOp::max),  // 3
                                     comm.all_reduce_async(x, ReduceOp::sum),  // 9
                                     comm.all_gather_async(x, gathered)};      // 9, 9, 9
    if (comm.rank() % 2 == 0) std::reverse(works.begin(), works.end());
    for (auto& w : works) w->wait();
    EXPECT_EQ(x.to_vector<float>(), std::vector<float>(5, 9.0f));
    EXPECT_EQ(gathered.to_vector<float>(), std::vector<float>(15, 9.0f));
  });
}

TEST(LocalNewGroup, RowsAndColumnsReduceIndependently) {
  run_spmd_threads(4, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<std::shared_ptr<Communicator>> groups;
    for (auto ranks : std::vector<std::vector<int>>{{0, 1}, {2, 3}, {0, 2}, {1, 3}})
      if (auto g = comm.new_group(ranks)) groups.push_back(g);
    ASSERT_EQ(groups.size(), 2u);  // one row and one column, nullptr for the others
    auto row = groups[0], column = groups[1];
    EXPECT_EQ(row->rank(), r % 2);
    EXPECT_EQ(column->rank(), r / 2);
    EXPECT_EQ(row->size(), 2);
    Tensor a = Tensor::full({64}, double(1 << r)), b = Tensor::full({64}, double(1 << r));
    WorkHandle row_work = row->all_reduce_async(a);  // both in flight at once
    WorkHandle column_work = column->all_reduce_async(b);
    column_work->wait();
    row_work->wait();
    const float row_sum = r < 2 ? 1 + 2 : 4 + 8, column_sum = r % 2 == 0 ? 1 + 4 : 2 + 8;
    EXPECT_EQ(a.to_vector<float>(), std::vector<float>(64, row_sum)) << "rank " << r;
    EXPECT_EQ(b.to_vector<float>(), std::vector<float>(64, column_sum)) << "rank " << r;
    Tensor pair = Tensor::zeros({2});
    column->all_gather(Tensor::full({1}, r), pair);
    EXPECT_EQ(pair.to_vector<float>(), (std::vector<float>{float(r % 2), float(r % 2 + 2)}));
    comm.barrier();  // the parent still works
  });
}

TEST(LocalNewGroup, DisagreeingRankListsFailOnEveryRank) {
  run_spmd_threads(2, [&](Communicator& comm) {
    try {
      auto group = comm.new_group(comm.rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{1});
      comm.barrier();
      ADD_FAILURE() << "rank " << comm.rank() << " did not fail";
    } catch (const CommunicationError& e) {
      EXPECT_NE(std::string(e.what()).find("disagree on new_group #0"), std::string::npos)
          << e.what();
    }
  });
}

TEST(LocalStats, CountCallsElementsAndBytes) {
  run_spmd_threads(2, [&](Communicator& comm) {
    comm.all_reduce(Tensor::zeros({100}));
    comm.all_gather(Tensor::zeros({10}), Tensor::zeros({20}));
    comm.reduce_scatter(Tensor::zeros({20}), Tensor::zeros({10}));
    comm.broadcast(Tensor::zeros({5}), /*root=*/0);
    comm.send(Tensor::zeros({7}), 1 - comm.rank());
    comm.recv(Tensor::zeros({7}), 1 - comm.rank());
    CommStats s = comm.stats();
    EXPECT_EQ(s.all_reduce_calls, 1);
    EXPECT_EQ(s.all_reduce_elements, 100);
    EXPECT_EQ(s.all_gather_calls, 1);
    EXPECT_EQ(s.all_gather_elements, 20);
    EXPECT_EQ(s.reduce_scatter_calls, 1);
    EXPECT_EQ(s.reduce_scatter_elements, 20);
    EXPECT_EQ(s.broadcast_calls, 1);
    EXPECT_EQ(s.broadcast_elements, 5);
    EXPECT_EQ(s.send_calls, 1);
    EXPECT_EQ(s.recv_calls, 1);
    // all_reduce 400 / 2 + all_gather 40 + reduce_scatter 80 / 2 + broadcast 20 (root) + send 28
    EXPECT_EQ(s.bytes_sent, comm.rank() == 0 ? 328 : 308);
  });
}

TEST(LocalErrors, MismatchedCountsFailOnEveryRankNamingEachRank) {
  run_spmd_threads(3, [&](Communicator& comm) {
    Tensor t = Tensor::zeros({comm.rank() == 1 ? 4 : 8});
    try {
      comm.all_reduce(t);
      ADD_FAILURE() << "rank " << comm.rank() << " did not fail";
    } catch (const CommunicationError& e) {
      const std::string m = e.what();
      for (const char* part : {"rank 0 all_reduce(sum, f32, 8)", "rank 1 all_reduce(sum, f32, 4)",
                               "rank 2 all_reduce(sum, f32, 8)"})
        EXPECT_NE(m.find(part), std::string::npos) << m;
    }
    EXPECT_THROW(comm.all_reduce(t), CommunicationError);  // broken: throws at once
    EXPECT_THROW(comm.send(t, 0), CommunicationError);
  });
}

TEST(LocalErrors, MismatchedRootOrOpFails) {
  EXPECT_THROW(run_spmd_threads(2,
                                [](Communicator& comm) {
                                  Tensor t = Tensor::zeros({4});
                                  comm.broadcast(t, comm.rank());
                                }),
               CommunicationError);
  EXPECT_THROW(run_spmd_threads(2,
                                [](Communicator& comm) {
                                  Tensor t = Tensor::zeros({4});
                                  comm.all_reduce(t,
                                                  comm.rank() == 0 ? ReduceOp::sum : ReduceOp::max);
                                }),
               CommunicationError);
}

TEST(LocalErrors, AMissingRankTimesOutNamingIt) {
  auto comms = LocalGroup::create(3, 300ms);
  std::vector<std::string> errors(2);
  std::vector<double> waited(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)  // rank 2 never calls
    threads.emplace_back([&, r] {
      const auto start = Clock::now();
      try {
        comms[size_t(r)]->all_reduce(Tensor::zeros({3}));
      } catch (const CommunicationError& e) {
        errors[size_t(r)] = e.what();
      }
      waited[size_t(r)] = std::chrono::duration<double>(Clock::now() - start).count();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[size_t(r)].find("timed out after 300 ms waiting for rank(s) [2]"),
              std::string::npos)
        << errors[size_t(r)];
    EXPECT_GE(waited[size_t(r)], 0.25);
    EXPECT_LT(waited[size_t(r)], 3.0);
  }
  EXPECT_THROW(comms[2]->all_reduce(Tensor::zeros({3})), CommunicationError);  // group broken
}

TEST(LocalSendRecv, MatchBySourceAndTagThenInOrder) {
  run_spmd_threads(2, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      comm.send(Tensor::full({2}, 1.0), 1, /*tag=*/1);
      comm.send(Tensor::full({2}, 2.0), 1, /*tag=*/2);
      comm.send(Tensor::full({2}, 3.0), 1, /*tag=*/1);
    } else {
      Tensor a = Tensor::zeros({2}), b = Tensor::zeros({2}), c = Tensor::zeros({2});
      WorkHandle wb = comm.recv_async(b, 0, 2);
      WorkHandle wa = comm.recv_async(a, 0, 1);
      WorkHandle wc = comm.recv_async(c, 0, 1);
      wc->wait();
      EXPECT_EQ(b.to_vector<float>(), std::vector<float>(2, 2.0f));
      EXPECT_EQ(a.to_vector<float>(), std::vector<float>(2, 1.0f));
      EXPECT_EQ(c.to_vector<float>(), std::vector<float>(2, 3.0f));
    }
  });
}

TEST(LocalSendRecv, SizeMismatchAndMissingSendFail) {
  try {
    run_spmd_threads(2, [](Communicator& comm) {
      if (comm.rank() == 0)
        comm.send(Tensor::zeros({4}), 1);
      else
        comm.recv(Tensor::zeros({5}), 0);
    });
    ADD_FAILURE() << "no error";
  } catch (const CommunicationError& e) {
    EXPECT_NE(std::string(e.what()).find("recv(f32, 5) on rank 1 from rank 0 with tag 0 matched a "
                                         "send(f32, 4)"),
              std::string::npos)
        << e.what();
  }
  auto comms = LocalGroup::create(2, 200ms);
  try {
    comms[1]->recv(Tensor::zeros({1}), 0, 3);
    ADD_FAILURE() << "no error";
  } catch (const CommunicationError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out after 200 ms: rank 0 sent nothing"),
              std::string::npos)
        << e.what();
  }
}

TEST(SpmdThreads, RethrowsTheFirstErrorAndWakesTheOtherRanks) {
  std::mutex mutex;
  std::vector<std::string> others;
  const auto start = Clock::now();
  try {
    run_spmd_threads(
        4,
        [&](Communicator& comm) {
          if (comm.rank() == 2) throw std::runtime_error("boom on rank 2");
          try {
            comm.all_reduce(Tensor::zeros({8}));  // would wait for the 60 s timeout
          } catch (const CommunicationError& e) {
            std::lock_guard<std::mutex> lock(mutex);
            others.push_back(e.what());
            throw;
          }
        },
        60s);
    ADD_FAILURE() << "no error";
  } catch (const CommunicationError& e) {
    ADD_FAILURE() << "rethrew a secondary error: " << e.what();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom on rank 2");
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  ASSERT_EQ(others.size(), 3u);
  for (const auto& m : others)
    EXPECT_NE(m.find("rank 2 failed: boom on rank 2"), std::string::npos) << m;
}

}  // namespace
}  // namespace libai::comm
