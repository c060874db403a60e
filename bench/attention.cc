// Fused attention throughput at GPT-2 small shapes (batch 8, 12 heads, d 64), s = 128 and
// s = 1024. GFLOP/s counts the dense work, 4·b·h·s²·d for the forward (two GEMMs), and
// 2.5 times that for the backward, whether or not a causal mask lets tiles be skipped
// (causal runs do about half of it), so that causal and full runs compare on one scale.
//
//   build/bench/bench_attention --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include "ops/attention.h"
#include "runtime/autograd.h"
#include "runtime/device_copy.h"
#include "runtime/rng.h"

namespace libai {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::f32);
  init_uniform(t, RngKey{seed, 1}, -1.0, 1.0);
  return dtype == DType::f32 ? t : to_dtype(t, dtype);
}

// Args: batch, heads, seq, d, causal.
void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"b", "h", "s", "d", "causal"});
  b->Args({8, 12, 128, 64, 1})->Args({8, 12, 128, 64, 0})->Args({8, 12, 1024, 64, 1});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

double dense_gflop(const benchmark::State& state) {
  return 4.0 * double(state.range(0)) * double(state.range(1)) * double(state.range(2)) *
         double(state.range(2)) * double(state.range(3)) * 1e-9;
}

void BM_AttentionForward(benchmark::State& state, DType dtype) {
  const int64_t b = state.range(0), h = state.range(1), s = state.range(2), d = state.range(3);
  Tensor q = random_tensor({b, h, s, d}, 1, dtype), k = random_tensor({b, h, s, d}, 2, dtype),
         v = random_tensor({b, h, s, d}, 3, dtype);
  ops::AttentionOptions options;
  options.causal = state.range(4) != 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(ops::scaled_dot_product_attention(q, k, v, options).data_ptr());
  state.counters["GFLOP/s"] =
      benchmark::Counter(dense_gflop(state), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionBackward(benchmark::State& state) {
  const int64_t b = state.range(0), h = state.range(1), s = state.range(2), d = state.range(3);
  Tensor q = random_tensor({b, h, s, d}, 1, DType::f32).set_requires_grad(true);
  Tensor k = random_tensor({b, h, s, d}, 2, DType::f32).set_requires_grad(true);
  Tensor v = random_tensor({b, h, s, d}, 3, DType::f32).set_requires_grad(true);
  Tensor g = random_tensor({b, h, s, d}, 4, DType::f32);
  ops::AttentionOptions options;
  options.causal = state.range(4) != 0;
  Tensor out = ops::scaled_dot_product_attention(q, k, v, options);
  for (auto _ : state) {
    // Each iteration records a fresh graph: the tape is consumed by one grad() call.
    state.PauseTiming();
    out = ops::scaled_dot_product_attention(q, k, v, options);
    state.ResumeTiming();
    benchmark::DoNotOptimize(autograd::grad(out, {q, k, v}, g)[0].data_ptr());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.5 * dense_gflop(state), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_AttentionForward, f32, DType::f32)->Apply(shapes);
BENCHMARK_CAPTURE(BM_AttentionForward, bf16, DType::bf16)->Apply(shapes);
BENCHMARK(BM_AttentionBackward)->Apply(shapes);

}  // namespace
}  // namespace libai

BENCHMARK_MAIN();
