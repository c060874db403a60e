// Auto parallel's search and training cost model (schedule/auto_parallel.h): the enumeration
// against the divisibility rules written out independently, the ranking against a brute force
// over every layout of random synthetic cost models, and the cost model's terms against the
// formulas of Note [Training cost model] computed by hand.
#include "schedule/auto_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "tests/schedule/error_of.h"

namespace libai::schedule {
namespace {

using testing::error_of;

bool contains(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& line : lines)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

TEST(AutoParallelSearch, EnumeratesExactlyTheLayoutsThatDivide) {
  const SearchSpace space{.devices = 8, .devices_per_node = 4, .num_layers = 6, .global_batch = 8,
                          .heads = 6};
  std::vector<std::string> excluded;
  const auto choices = enumerate_choices(space, &excluded);
  // The same rules, written out over every tuple.
  int64_t expected = 0;
  for (int dp = 1; dp <= 8; ++dp)
    for (int tp = 1; tp <= 8; ++tp)
      for (int pp = 1; pp <= 8; ++pp) {
        if (dp * tp * pp != 8 || 8 % dp != 0 || 4 % tp != 0 || 6 % tp != 0 || pp > 6) continue;
        for (int mbs = 1; mbs <= 8 / dp; ++mbs) {
          if ((8 / dp) % mbs != 0) continue;
          const int acc = 8 / dp / mbs;
          // gpipe and 1f1b with uniform and measured splits, interleaved uniform only
          int schedules = pp == 1 ? 1 : 4;
          if (pp > 1)
            for (int v : {2, 4})
              if (pp * v <= 6 && acc % pp == 0) ++schedules;
          expected += schedules * 2 * (dp == 1 ? 1 : 4);  // x checkpointing x ZeRO stages
        }
      }
  EXPECT_EQ(int64_t(choices.size()), expected);
  std::set<std::string> seen;
  for (const auto& c : choices) {
    EXPECT_EQ(c.devices(), 8);
    EXPECT_EQ(c.dp * c.micro_batch_size * c.accumulation, 8);
    EXPECT_TRUE(c.tp == 1 || c.tp == 2) << describe(c);
    EXPECT_TRUE(seen.insert(describe(c)).second) << "twice: " << describe(c);
  }
  EXPECT_TRUE(contains(excluded, "tp not dividing a node's 4 devices")) << excluded.size();
  EXPECT_TRUE(contains(excluded, "tp not dividing the model's 6 heads"));
  EXPECT_TRUE(contains(excluded, "more pipeline stages than the model's 6 layers"));
  EXPECT_TRUE(contains(excluded, "ZeRO and one replica"));
  EXPECT_TRUE(contains(excluded, "interleaved layouts with a measured split"));
}

TEST(AutoParallelSearch, TheConfigsKeysAreConstraints) {
  SearchSpace space{.devices = 8, .devices_per_node = 8, .num_layers = 8, .global_batch = 16};
  space.constraints.tp = 2;
  space.constraints.zero_stage = 1;
  space.constraints.activation_checkpoint = true;
  space.constraints.schedule = PipelineSchedule::interleaved;
  space.constraints.balanced = false;
  const auto choices = enumerate_choices(space);
  ASSERT_FALSE(choices.empty());
  for (const auto& c : choices) {
    EXPECT_FALSE(c.balanced);
    EXPECT_EQ(c.tp, 2);
    EXPECT_EQ(c.zero_stage, 1);
    EXPECT_TRUE(c.activation_checkpoint);
    EXPECT_EQ(c.schedule, PipelineSchedule::interleaved);
    EXPECT_GT(c.pp, 1);
    EXPECT_GT(c.dp, 1);  // ZeRO needs replicas
  }
  // A measured split: every pipeline splits so (interleaved ones cannot); one stage has no split.
  space.constraints = {.balanced = true};
  int pipelines = 0;
  for (const auto& c : enumerate_choices(space)) {
    EXPECT_EQ(c.balanced, c.pp > 1) << describe(c);
    EXPECT_NE(c.schedule, PipelineSchedule::interleaved);
    pipelines += c.pp > 1;
  }
  EXPECT_GT(pipelines, 0);
  space.constraints = {.dp = 8, .tp = 2};
  EXPECT_NE(error_of([&] { search_parallel(space, [](const ParallelChoice&) { return ParallelEstimate{}; }); })
                .find("auto parallel: no layout of 8 devices divides"),
            std::string::npos);
}

// A synthetic cost model with a known form: compute shared by the devices, a bubble that
// shrinks with accumulation, collectives that grow with tp and dp, per-micro-batch overhead,
// memory that ZeRO, checkpointing and parallelism shrink. Random coefficients per instance.
struct Synthetic {
  double compute, bubble, tp_cost, dp_cost, micro_cost, model_memory, activation_memory, cap;
  double split;  // what a measured split saves of a pipeline's work, and costs in memory
  double step(const ParallelChoice& c) const {
    const double work = compute / c.devices() * (c.balanced ? 1 - 0.1 * split : 1.0);
    const double b = c.pp > 1 ? bubble * (c.pp - 1) / double(c.accumulation * (c.schedule == PipelineSchedule::interleaved ? c.chunks : 1)) : 0;
    const double gpipe = c.schedule == PipelineSchedule::gpipe && c.pp > 1 ? 0.01 * compute : 0;
    return work * (1 + b) * (c.activation_checkpoint ? 1.33 : 1.0) + tp_cost * (c.tp - 1) +
           dp_cost * (c.dp - 1) * (c.zero_stage == 3 ? 1.5 : 1.0) + micro_cost * c.accumulation + gpipe;
  }
  double memory(const ParallelChoice& c) const {
    const double state = model_memory / (c.tp * c.pp) *
                         (c.zero_stage == 0 ? 1.0 : c.zero_stage == 1 ? 0.5 : c.zero_stage == 2 ? 0.3 : 0.1);
    const double stash = c.schedule == PipelineSchedule::gpipe ? c.accumulation : c.pp;
    return (state + activation_memory * c.micro_batch_size * stash / c.tp *
                        (c.activation_checkpoint ? 0.2 : 1.0)) *
           (c.balanced ? 1 + 0.2 * split : 1.0);
  }
};

TEST(AutoParallelSearch, RanksAsABruteForceOverEveryLayout) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int constrained_by_memory = 0, feasible = 0;
  for (int instance = 0; instance < 60; ++instance) {
    const Synthetic s{.compute = 10 + 100 * u(gen), .bubble = u(gen), .tp_cost = 0.5 * u(gen),
                      .dp_cost = 0.5 * u(gen), .micro_cost = 0.2 * u(gen),
                      .model_memory = 50 + 100 * u(gen), .activation_memory = 2 * u(gen),
                      .cap = 2 + 12 * u(gen), .split = u(gen)};
    const SearchSpace space{.devices = 16, .devices_per_node = 8, .num_layers = 12, .global_batch = 32,
                            .heads = 8};
    const SearchResult r = search_parallel(space, [&](const ParallelChoice& c) {
      return ParallelEstimate{.step_seconds = s.step(c), .memory_bytes = s.memory(c), .memory_cap = s.cap};
    });
    // Brute force: every tuple, its own rules, the fastest that fits.
    double best = INFINITY, fastest = INFINITY;
    for (int dp = 1; dp <= 16; ++dp)
      for (int tp : {1, 2, 4, 8})
        for (int pp = 1; pp <= 12; ++pp) {
          if (dp * tp * pp != 16 || 32 % dp != 0) continue;
          for (int mbs = 1; mbs <= 32 / dp; ++mbs) {
            if ((32 / dp) % mbs != 0) continue;
            for (PipelineSchedule sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                                           PipelineSchedule::interleaved})
              for (int v : {1, 2, 4}) {
                const int acc = 32 / dp / mbs;
                if ((sched == PipelineSchedule::interleaved) != (v > 1)) continue;
                if (pp == 1 && sched != PipelineSchedule::one_f_one_b) continue;
                if (v > 1 && (pp * v > 12 || acc % pp != 0)) continue;
                for (bool balanced : {false, true})
                  for (bool ckpt : {false, true})
                    for (int zero = 0; zero <= 3; ++zero) {
                      if (zero > 0 && dp == 1) continue;
                      if (balanced && (pp == 1 || v > 1)) continue;
                      const ParallelChoice c{.dp = dp, .tp = tp, .pp = pp, .micro_batch_size = mbs,
                                             .accumulation = acc, .zero_stage = zero,
                                             .activation_checkpoint = ckpt, .schedule = sched,
                                             .chunks = v, .balanced = balanced};
                      fastest = std::min(fastest, s.step(c));
                      if (s.memory(c) <= s.cap) best = std::min(best, s.step(c));
                    }
              }
          }
        }
    if (std::isinf(best)) {
      EXPECT_TRUE(r.ranked.empty()) << instance;
      EXPECT_FALSE(r.rejected.empty());
      continue;
    }
    ASSERT_FALSE(r.ranked.empty()) << instance;
    ++feasible;
    EXPECT_DOUBLE_EQ(r.ranked.front().estimate.step_seconds, best) << instance;
    EXPECT_LE(r.ranked.front().estimate.memory_bytes, s.cap);
    for (size_t i = 1; i < r.ranked.size(); ++i)
      EXPECT_LE(r.ranked[i - 1].estimate.step_seconds, r.ranked[i].estimate.step_seconds);
    EXPECT_EQ(int64_t(r.ranked.size() + r.rejected.size()), r.evaluated);
    if (fastest < best) {
      ++constrained_by_memory;
      EXPECT_TRUE(contains([&] {
        std::vector<std::string> reasons;
        for (const auto& x : r.rejected) reasons.push_back(x.reason);
        return reasons;
      }(), "GB on a device of"));
    }
  }
  EXPECT_GT(constrained_by_memory, 5) << "the instances should exercise memory limits";
  EXPECT_GT(feasible, 30);
  EXPECT_LT(constrained_by_memory, feasible);
}

// ---------------------------------------------------------------------------------------------
// The training cost model.

TrainCostModel small_model(int devices) {
  TrainCostModel m;
  m.layer_flops.assign(4, 2e9);            // per sample
  m.layer_parameters.assign(4, 1e6);
  m.layer_activation_bytes.assign(4, 8e6);  // per sample
  m.layer_output_bytes.assign(4, 1e6);
  m.embedding_flops = 1e8;
  m.embedding_parameters = 2e6;
  m.head_flops = 4e8;
  m.head_parameters = 2e6;
  m.devices.assign(size_t(devices), {.gflops = 100, .gbs = 10, .memory_bytes = 0});
  m.devices_per_node = 2;
  m.intra_node = {.bandwidth_gbs = 20, .latency_seconds = 1e-5};
  m.inter_node = {.bandwidth_gbs = 2, .latency_seconds = 1e-4};
  m.global_batch = 8;
  return m;
}

TEST(TrainingCostModel, OneDeviceIsItsLayersForwardAndBackward) {
  const TrainCostModel m = small_model(1);
  const ParallelChoice c{.micro_batch_size = 2, .accumulation = 4};
  const ParallelEstimate e = estimate_training(m, c);
  // Per micro-batch: 4 layers of 2 x 2e9 flops at 100 GFLOP/s (compute-bound: 4e6 bytes at
  // 10 GB/s is 0.4 ms < 40 ms), embedding and head likewise, times 1 + backward 2.
  const double forward = 4 * 0.04 + 2e8 / 1e11 + 8e8 / 1e11;
  EXPECT_NEAR(e.step_seconds, 4 * 3 * forward, 1e-9);
  EXPECT_DOUBLE_EQ(e.data_comm_seconds, 0);
  EXPECT_DOUBLE_EQ(e.samples_per_second, 8 / e.step_seconds);
  // Memory: 16 bytes a parameter (no ZeRO, one replica) plus the stashed activations of one
  // micro-batch (1F1B on one stage: forward then backward).
  EXPECT_NEAR(e.memory_bytes, 16 * 8e6 + 2 * 4 * 8e6, 1e3);
}

TEST(TrainingCostModel, AFixedOverheadPerLayerAndMicroBatchDoesNotShrinkWithTensorParallelism) {
  TrainCostModel m = small_model(1);
  const ParallelEstimate plain = estimate_training(m, {.micro_batch_size = 2, .accumulation = 4});
  m.devices[0].overhead_seconds = 0.01;
  const ParallelEstimate slow = estimate_training(m, {.micro_batch_size = 2, .accumulation = 4});
  // 4 layers x 4 micro-batches x (forward + backward 2) x 10 ms.
  EXPECT_NEAR(slow.step_seconds - plain.step_seconds, 4 * 4 * 3 * 0.01, 1e-9);
  TrainCostModel two = small_model(2);
  const ParallelEstimate tp2 = estimate_training(two, {.tp = 2, .micro_batch_size = 2, .accumulation = 4});
  for (auto& d : two.devices) d.overhead_seconds = 0.01;
  const ParallelEstimate tp2_slow = estimate_training(two, {.tp = 2, .micro_batch_size = 2, .accumulation = 4});
  EXPECT_NEAR(tp2_slow.step_seconds - tp2.step_seconds, 4 * 4 * 3 * 0.01, 1e-9);
}

TEST(TrainingCostModel, DataParallelismAddsARingAllReduceOfTheGradients) {
  const TrainCostModel m = small_model(4);
  const ParallelChoice c{.dp = 4, .micro_batch_size = 2, .accumulation = 1};
  const ParallelEstimate e = estimate_training(m, c);
  // 4 devices over 2 nodes: the ring crosses nodes. 8e6 parameters x 4 bytes. Without ZeRO
  // the buckets reduce during the backward (0.36 s, longer than the ring): only the last
  // bucket, 25 MiB of the 32 MB, is left after it.
  const double ring = 2.0 * 3 / 4 * 32e6 / 2e9 + 2 * 3 * 1e-4;
  const double last_bucket = ring * (25 << 20) / 32e6;
  EXPECT_NEAR(e.data_comm_seconds, last_bucket, 1e-12);
  EXPECT_NEAR(e.step_seconds, e.pipeline_seconds + last_bucket, 1e-12);
  // A link 100x slower: the ring outlasts the backward, which it started with.
  TrainCostModel slow = m;
  slow.inter_node.bandwidth_gbs = 0.02;
  const double slow_ring = 2.0 * 3 / 4 * 32e6 / 0.02e9 + 2 * 3 * 1e-4;
  const ParallelEstimate s = estimate_training(slow, c);
  const double backward = s.pipeline_seconds / 3 * 2;  // forward + 2 forwards, one micro-batch
  EXPECT_NEAR(s.data_comm_seconds, slow_ring - backward, 1e-9);
  const ParallelChoice zero3{.dp = 4, .micro_batch_size = 2, .accumulation = 1, .zero_stage = 3};
  const ParallelEstimate z = estimate_training(m, zero3);
  EXPECT_NEAR(z.data_comm_seconds, 2.0 * 3 / 4 * 48e6 / 2e9 + 2 * 3 * 1e-4, 1e-12);
  EXPECT_LT(z.memory_bytes, e.memory_bytes);  // ZeRO-3 shards everything
  // Inside one node (2 devices): the node's link.
  TrainCostModel two = small_model(2);
  const ParallelEstimate inside = estimate_training(two, {.dp = 2, .micro_batch_size = 4});
  EXPECT_NEAR(inside.data_comm_seconds, (2.0 * 1 / 2 * 32e6 / 20e9 + 2 * 1e-5) * (25 << 20) / 32e6, 1e-12);
}

TEST(TrainingCostModel, CheckpointingTradesARecomputedForwardForActivations) {
  const TrainCostModel m = small_model(1);
  const ParallelEstimate plain = estimate_training(m, {.micro_batch_size = 8});
  const ParallelEstimate ckpt = estimate_training(m, {.micro_batch_size = 8, .activation_checkpoint = true});
  EXPECT_NEAR(ckpt.step_seconds / plain.step_seconds, 4.0 / 3.0, 1e-9);
  // Activations of a micro-batch of 8: 4 layers x 8e6 each per sample, or only their 1e6 input.
  EXPECT_NEAR(plain.memory_bytes - ckpt.memory_bytes, 8 * 4 * (8e6 - 1e6), 1e3);
}

TEST(TrainingCostModel, TensorParallelismSplitsComputeAndPaysCollectivesOnTheNodeLink) {
  const TrainCostModel m = small_model(2);
  const ParallelEstimate one = estimate_training(small_model(1), {.micro_batch_size = 2, .accumulation = 4});
  const ParallelEstimate tp2 = estimate_training(m, {.tp = 2, .micro_batch_size = 2, .accumulation = 4});
  // Each layer: half the compute, plus 2 all-reduces of 2 x 1e6 bytes over 2 ranks (node link),
  // forward and (x2) backward.
  const double collectives = 2 * (2.0 * 1 / 2 * 2e6 / 20e9 + 2 * 1e-5);
  EXPECT_NEAR(tp2.step_seconds, one.step_seconds / 2 + 4 * 4 * 3 * collectives, 1e-9);
  EXPECT_NEAR(tp2.tensor_comm_seconds, 4 * 4 * 3 * collectives, 1e-9);
}

TEST(TrainingCostModel, TheSearchPrefersWhatFitsAndSaysWhyTheRestDoNot) {
  TrainCostModel m = small_model(4);
  for (auto& d : m.devices) d.memory_bytes = 90e6;  // data parallelism without ZeRO does not fit
  const SearchSpace space{.devices = 4, .devices_per_node = 2, .num_layers = 4, .global_batch = 8};
  const SearchResult r =
      search_parallel(space, [&](const ParallelChoice& c) { return estimate_training(m, c); });
  ASSERT_FALSE(r.ranked.empty());
  for (const auto& x : r.ranked) EXPECT_LE(x.estimate.memory_bytes, 90e6) << describe(x.choice);
  bool dp4_without_zero_rejected = false;
  for (const auto& x : r.rejected)
    if (x.choice.dp == 4 && x.choice.zero_stage == 0 && !x.choice.activation_checkpoint &&
        x.choice.micro_batch_size == 2)
      dp4_without_zero_rejected = x.reason.find("GB on a device of 0.09 GB") != std::string::npos;
  EXPECT_TRUE(dp4_without_zero_rejected);
  // The ranking is by the estimates the cost model gives.
  const auto& best = r.ranked.front();
  EXPECT_DOUBLE_EQ(best.estimate.step_seconds, estimate_training(m, best.choice).step_seconds);
}

// Note [One replica stands for all]: the search's estimate from one replica's plan equals the
// estimate from the whole plan (the one compiled when a plan is asked for).
TEST(TrainingCostModel, OneReplicaStandsForAllOnDevicesAlike) {
  TrainCostModel m = small_model(8);
  m.global_batch = 16;
  for (auto& d : m.devices) d.memory_bytes = 1e9;
  int compared = 0;
  EstimateCache cache;
  for (const ParallelChoice& c : enumerate_choices({.devices = 8, .devices_per_node = 2,
                                                    .num_layers = 4, .global_batch = 16})) {
    if (c.dp == 1) continue;
    Plan whole;
    const ParallelEstimate full = estimate_training(m, c, &whole);
    const ParallelEstimate fast = estimate_training(m, c);
    EXPECT_DOUBLE_EQ(fast.step_seconds, full.step_seconds) << describe(c);
    // The search's reuse of the step across ZeRO stages (EstimateCache) changes nothing.
    const ParallelEstimate cached = estimate_training(m, c, cache);
    EXPECT_DOUBLE_EQ(cached.step_seconds, full.step_seconds) << describe(c);
    EXPECT_DOUBLE_EQ(cached.memory_bytes, full.memory_bytes) << describe(c);
    EXPECT_DOUBLE_EQ(cached.bubble_fraction, full.bubble_fraction) << describe(c);
    EXPECT_DOUBLE_EQ(fast.memory_bytes, full.memory_bytes) << describe(c);
    EXPECT_DOUBLE_EQ(fast.data_comm_seconds, full.data_comm_seconds) << describe(c);
    ++compared;
  }
  EXPECT_GT(compared, 100);
}

// A pipeline over a device 4x faster than the other: the measured split gives it more layers
// and beats the even split, whose step waits on the slow device's half; on devices alike the
// measured split is no slower than the even one.
// small_model's layers, 8 of them, of `parameters` each.
TrainCostModel eight_layers(int devices, double parameters) {
  TrainCostModel m = small_model(devices);
  m.layer_flops.assign(8, 2e9);
  m.layer_parameters.assign(8, parameters);
  m.layer_activation_bytes.assign(8, 8e6);
  m.layer_output_bytes.assign(8, 1e6);
  return m;
}

TEST(TrainingCostModel, AMeasuredSplitFollowsUnequalDevices) {
  TrainCostModel m = eight_layers(2, 1e6);
  m.devices[1].gflops = 25;  // 4x slower
  const ParallelChoice even{.pp = 2, .micro_batch_size = 1, .accumulation = 8};
  ParallelChoice measured = even;
  measured.balanced = true;
  Plan split;
  const ParallelEstimate u = estimate_training(m, even);
  const ParallelEstimate b = estimate_training(m, measured, &split);
  EXPECT_LT(b.step_seconds, 0.7 * u.step_seconds);
  ASSERT_EQ(split.stages.size(), 2u);
  int on_fast = 0;
  for (const StagePlan& s : split.stages)
    if (s.devices == std::vector<int>{0}) on_fast = s.num_layers();
  EXPECT_GE(on_fast, 6) << "the fast device should hold most of the 8 layers";
  const TrainCostModel alike = small_model(2);
  ParallelChoice alike_measured{.pp = 2, .micro_batch_size = 1, .accumulation = 8};
  alike_measured.balanced = true;
  EXPECT_LE(estimate_training(alike, alike_measured).step_seconds,
            estimate_training(alike, {.pp = 2, .micro_batch_size = 1, .accumulation = 8}).step_seconds + 1e-12);
  EXPECT_NE(describe(measured).find("measured split"), std::string::npos);
}

// EstimateCache: reusing the step across ZeRO stages gives every choice's estimate as compiling
// it whole does, on unequal devices whose memory binds (so ZeRO moves the measured split).
TEST(TrainingCostModel, TheSearchsReuseOfTheStepChangesNoEstimate) {
  TrainCostModel m = eight_layers(4, 4e6);
  for (size_t d = 0; d < m.devices.size(); ++d) {
    m.devices[d].gflops = d % 2 ? 30 : 100;
    m.devices[d].memory_bytes = 4e8;
  }
  EstimateCache cache;
  int compared = 0, failed = 0;
  for (const ParallelChoice& c : enumerate_choices({.devices = 4, .devices_per_node = 2,
                                                    .num_layers = 8, .global_batch = 8})) {
    ParallelEstimate whole, cached;
    std::string whole_error, cached_error;
    try {
      whole = estimate_training(m, c);
    } catch (const Error& e) {
      whole_error = e.what();
    }
    try {
      cached = estimate_training(m, c, cache);
    } catch (const Error& e) {
      cached_error = e.what();
    }
    EXPECT_EQ(cached_error, whole_error) << describe(c);
    failed += !whole_error.empty();
    EXPECT_DOUBLE_EQ(cached.step_seconds, whole.step_seconds) << describe(c);
    EXPECT_DOUBLE_EQ(cached.memory_bytes, whole.memory_bytes) << describe(c);
    EXPECT_DOUBLE_EQ(cached.bubble_fraction, whole.bubble_fraction) << describe(c);
    ++compared;
  }
  EXPECT_GT(compared, 100);
  EXPECT_LT(failed, compared);
}

TEST(TrainingCostModel, AChoiceThatDoesNotMatchIsRefusedNamingIt) {
  const TrainCostModel m = small_model(2);
  EXPECT_NE(error_of([&] { estimate_training(m, {.dp = 4, .micro_batch_size = 2}); })
                .find("2 devices, but dp 4 x tp 1 x pp 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { estimate_training(m, {.dp = 2, .micro_batch_size = 3}); })
                .find("does not make the global batch of 8"),
            std::string::npos);
}

}  // namespace
}  // namespace libai::schedule
