// Samplers: data-parallel ranks' micro-batches are disjoint and cover the data, follow Note
// [Micro-batch order], and resuming from consumed_samples continues the same sequence; the
// prefetcher keeps the producer's order and surfaces its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "train/data/numpy_random.h"
#include "train/data/prefetcher.h"
#include "train/data/sampler.h"

namespace libai::train::data {
namespace {

TEST(CyclicSampler, RanksAreDisjointAndCoverEachEpoch) {
  for (bool shuffle : {false, true}) {
    const int64_t micro = 3, dp = 4, n = 120;  // 10 micro-steps per epoch
    CyclicSampler sampler(
        n, {.micro_batch_size = micro, .data_parallel_size = dp, .shuffle = shuffle, .seed = 7});
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int64_t> seen;
      for (int64_t step = 0; step < 10; ++step)
        for (int64_t r = 0; r < dp; ++r) {
          auto b = sampler.micro_batch((epoch * 10 + step) * micro * dp, r);
          ASSERT_EQ(int64_t(b.size()), micro);
          seen.insert(seen.end(), b.begin(), b.end());
        }
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> all(n);
      for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;
      EXPECT_EQ(seen, all) << "epoch " << epoch << " shuffle " << shuffle;
    }
  }
}

TEST(CyclicSampler, ShufflesEachEpochAsNumpysPermutation) {
  const int64_t n = 50;
  CyclicSampler sampler(n, {.micro_batch_size = 5, .shuffle = true, .seed = 100});
  for (int64_t epoch : {0, 1, 4}) {
    NumpyRandomState rng(uint32_t(100 + epoch));
    const auto perm = rng.permutation(n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(sampler.index_at(epoch * n + i), perm[size_t(i)]);
  }
  EXPECT_NE(sampler.micro_batch(0, 0), sampler.micro_batch(n, 0));
}

// Rank r's micro-batch of each micro-step is the slice [r micro, (r + 1) micro) of what one
// rank with micro x dp samples per micro-batch takes (Note [Micro-batch order]).
TEST(CyclicSampler, RankSlicesFollowTheMicroBatchOrder) {
  const int64_t micro = 2, dp = 3, n = 17;  // epochs end inside micro-steps
  SamplerOptions options{
      .micro_batch_size = micro, .data_parallel_size = dp, .shuffle = true, .seed = 3};
  CyclicSampler ranks(n, options);
  CyclicSampler single(n, {.micro_batch_size = micro * dp, .shuffle = true, .seed = 3});
  for (int64_t consumed = 0; consumed < 10 * micro * dp; consumed += micro * dp) {
    std::vector<int64_t> joined;
    for (int64_t r = 0; r < dp; ++r) {
      auto b = ranks.micro_batch(consumed, r);
      joined.insert(joined.end(), b.begin(), b.end());
    }
    EXPECT_EQ(joined, single.micro_batch(consumed, 0));
  }
}

TEST(SampleCursor, ResumingFromConsumedSamplesContinuesTheSequence) {
  CyclicSampler sampler(
      37, {.micro_batch_size = 4, .data_parallel_size = 2, .shuffle = true, .seed = 11});
  for (int64_t rank : {0, 1}) {
    SampleCursor full(sampler, rank);
    std::vector<std::vector<int64_t>> sequence;
    int64_t consumed_at_13 = 0;
    for (int i = 0; i < 40; ++i) {
      if (i == 13) consumed_at_13 = full.consumed_samples();
      sequence.push_back(full.next());
    }
    EXPECT_EQ(consumed_at_13, 13 * 8);
    CyclicSampler fresh(37, sampler.options());  // a new process: no cached epoch
    SampleCursor resumed(fresh, rank, consumed_at_13);
    for (int i = 13; i < 40; ++i) EXPECT_EQ(resumed.next(), sequence[size_t(i)]) << i;
  }
}

TEST(SingleRoundSampler, OnePassThenEmpty) {
  const int64_t n = 23, micro = 3, dp = 2;
  SingleRoundSampler sampler(
      n, {.micro_batch_size = micro, .data_parallel_size = dp, .shuffle = true, .seed = 5});
  std::vector<int64_t> seen;
  for (int64_t consumed = 0; consumed < 5 * micro * dp; consumed += micro * dp)
    for (int64_t r = 0; r < dp; ++r) {
      auto b = sampler.micro_batch(consumed, r);
      seen.insert(seen.end(), b.begin(), b.end());
    }
  EXPECT_EQ(int64_t(seen.size()), n);
  std::set<int64_t> unique(seen.begin(), seen.end());
  EXPECT_EQ(int64_t(unique.size()), n);
  EXPECT_EQ(sampler.micro_batch(24, 1).size(), 0u);
  SingleRoundSampler dropping(n, sampler.options(), /*drop_last=*/true);
  EXPECT_EQ(dropping.micro_batch(18, 0).size(), 0u);  // 18 + 6 > 23
  EXPECT_EQ(dropping.micro_batch(12, 1).size(), 3u);
}

TEST(Sampler, BadPositionsNameTheProblem) {
  CyclicSampler sampler(10, {.micro_batch_size = 2, .data_parallel_size = 2});
  EXPECT_THROW(sampler.micro_batch(3, 0), Error);  // not a whole micro-step
  EXPECT_THROW(sampler.micro_batch(4, 2), Error);  // no such rank
  EXPECT_THROW(CyclicSampler(0, {}), Error);
}

models::TensorMap numbered(int64_t i) {
  return {{"x", Tensor::from_vector(std::vector<int64_t>{i})}};
}

TEST(Prefetcher, KeepsTheProducersOrderAndEnds) {
  int64_t next = 0;
  Prefetcher prefetcher(
      [&]() -> std::optional<models::TensorMap> {
        if (next == 50) return std::nullopt;
        return numbered(next++);
      },
      3);
  for (int64_t i = 0; i < 50; ++i) {
    auto b = prefetcher.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->at("x").item<int64_t>(), i);
  }
  EXPECT_FALSE(prefetcher.next().has_value());
  EXPECT_EQ(prefetcher.batches(), 50);
}

TEST(Prefetcher, AProducerErrorSurfacesInTheConsumer) {
  int64_t next = 0;
  Prefetcher prefetcher([&]() -> std::optional<models::TensorMap> {
    if (next == 5) LIBAI_CHECK(false, "sample 5 is corrupt");
    return numbered(next++);
  });
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(prefetcher.next()->at("x").item<int64_t>(), i);
  try {
    prefetcher.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 5 is corrupt"), std::string::npos);
  }
  EXPECT_FALSE(prefetcher.next().has_value());
}

TEST(Prefetcher, StopsWithAFullQueueAndCountsWaits) {
  {
    Prefetcher endless([] { return std::optional<models::TensorMap>(numbered(0)); }, 2);
    endless.next();
  }  // the destructor releases the producer blocked on the full queue
  Prefetcher slow([n = 0]() mutable -> std::optional<models::TensorMap> {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (n == 3) return std::nullopt;
    return numbered(n++);
  });
  while (slow.next()) {
  }
  EXPECT_GT(slow.wait_seconds(), 0.04);  // four 20 ms productions waited for
}

TEST(Prefetcher, MicroBatchProducerFollowsTheCursor) {
  struct Counting : Dataset {
    int64_t size() const override { return 10; }
    models::TensorMap get(int64_t i) const override { return numbered(i); }
  } dataset;
  CyclicSampler sampler(10, {.micro_batch_size = 2, .shuffle = true, .seed = 1});
  SampleCursor cursor(sampler, 0), reference(sampler, 0);
  Prefetcher prefetcher(micro_batch_producer(dataset, cursor, 7));
  int64_t count = 0;
  while (auto b = prefetcher.next()) {
    EXPECT_EQ(b->at("x").to_vector<int64_t>(), reference.next());
    EXPECT_EQ(b->at("x").shape(), (Shape{2, 1}));
    ++count;
  }
  EXPECT_EQ(count, 7);
}

}  // namespace
}  // namespace libai::train::data
