// ops::matmul against raw cblas_sgemm, side by side in one run, at the GEMM shapes of
// GPT-2 small (hidden 768) and medium (hidden 1024) layers with 1024 tokens (8 x 128) and 128
// tokens (1 x 128), GPT-2's LM head, all-MiniLM-L6-v2's layers (hidden 384) with 640 tokens
// (a batch of 32 sentences of 20 tokens), the bf16 path, and the packed inference product
// (ops::linear_packed: weight packed once, bias fused). The summary printed at the end gives
// each op's GFLOP/s as a fraction of sgemm's at the same shape.
//
//   build/bench/bench_matmul --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "ops/matmul.h"
#include "ops/packed_linear.h"
#include "runtime/device_copy.h"
#include "runtime/rng.h"
#include "runtime/threads.h"

namespace libai {

// {k, n} of [1024, k] x [k, n]: GPT-2 small (hidden 768) then medium (hidden 1024) layers.
constexpr std::pair<int64_t, int64_t> kShapes[] = {
    {768, 2304}, {768, 768},   {768, 3072},  {3072, 768},
    {1024, 3072}, {1024, 4096}, {4096, 1024}, {768, 50257}};
constexpr int64_t kTokens[] = {1024, 128};  // 8 sequences x 128, one sequence
// MiniLM's {k, n} (q, k, v together; out; up; down) at 640 tokens.
constexpr std::pair<int64_t, int64_t> kMiniLmShapes[] = {
    {384, 1152}, {384, 384}, {384, 1536}, {1536, 384}};
constexpr int64_t kMiniLmTokens = 640;

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, DType::f32);
  init_uniform(t, RngKey{seed, 1}, -1.0, 1.0);
  return dtype == DType::f32 ? t : to_dtype(t, dtype);
}

void set_flops(benchmark::State& state, int64_t m, int64_t k, int64_t n) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(m) * double(n) * double(k) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Sgemm(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = random_tensor({m, k}, 1), b = random_tensor({k, n}, 2), c = Tensor::empty({m, n});
  // The peer: OpenBLAS with its own threads, as many as our budget (ours runs it on one thread
  // per block of our pool, runtime/blas.h).
  openblas_set_num_threads(thread_budget(Device::cpu()));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f,
                a.data<float>(), int(k), b.data<float>(), int(n), 0.0f, c.data<float>(), int(n));
    benchmark::DoNotOptimize(c.data<float>());
  }
  openblas_set_num_threads(1);
  set_flops(state, m, k, n);
}

void BM_Matmul(benchmark::State& state, DType dtype) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = random_tensor({m, k}, 1, dtype), b = random_tensor({k, n}, 2, dtype);
  for (auto _ : state) benchmark::DoNotOptimize(ops::matmul(a, b).data_ptr());
  set_flops(state, m, k, n);
}

// linear with a torch-layout weight [out, in]: the transposed operand goes to BLAS as is.
void BM_Linear(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor x = random_tensor({8, m / 8, k}, 1), w = random_tensor({n, k}, 2);
  Tensor bias = random_tensor({n}, 3);
  for (auto _ : state) benchmark::DoNotOptimize(ops::linear(x, w, bias).data_ptr());
  set_flops(state, m, k, n);
}

// linear with the weight packed once (ops/packed_linear.h), as inference runs it.
void BM_PackedLinear(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor x = random_tensor({m, k}, 1), w = random_tensor({n, k}, 2);
  Tensor bias = random_tensor({n}, 3);
  const ops::PackedWeight packed = ops::pack_weight(w);
  for (auto _ : state) benchmark::DoNotOptimize(ops::linear_packed(x, packed, bias).data_ptr());
  set_flops(state, m, k, n);
}

// Prints the usual table, then each benchmark's GFLOP/s over sgemm's at the same shape.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      // "<op>/<m>x<k>x<n>/<m>/<k>/<n>/real_time" -> op, shape
      std::string full = run.benchmark_name();
      auto slash = full.find('/'), end = full.find('/', slash + 1);
      auto it = run.counters.find("GFLOP/s");
      if (end == std::string::npos || it == run.counters.end()) continue;
      std::string op = full.substr(0, slash), shape = full.substr(slash + 1, end - slash - 1);
      // With --benchmark_repetitions the best run counts: load from other processes only
      // ever slows a run down.
      double& rate = rates_[shape][op];
      if (rate == 0) order_.push_back({op, shape});
      rate = std::max(rate, double(it->second.value));
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n| shape (m x k x n) | op | GFLOP/s | vs sgemm |\n|---|---|---:|---:|\n");
    for (const auto& [op, shape] : order_) {
      auto& row = rates_[shape];
      double rate = row[op], base = row.count("sgemm") ? row["sgemm"] : 0;
      std::printf("| %s | %s | %.1f | %.3f |\n", shape.c_str(), op.c_str(), rate,
                  base > 0 ? rate / base : 0.0);
    }
  }

 private:
  std::map<std::string, std::map<std::string, double>> rates_;  // shape -> benchmark -> rate
  std::vector<std::pair<std::string, std::string>> order_;      // (op, shape) first seen
};

}  // namespace libai

int main(int argc, char** argv) {
  using namespace libai;
  // One shape after another, each op beside raw sgemm, so load drift hits them alike.
  std::vector<std::array<int64_t, 3>> shapes;
  for (int64_t m : kTokens)
    for (auto [k, n] : kShapes) shapes.push_back({m, k, n});
  for (auto [k, n] : kMiniLmShapes) shapes.push_back({kMiniLmTokens, k, n});
  for (auto [m, k, n] : shapes) {
    std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    for (auto* b :
         {benchmark::RegisterBenchmark(("sgemm/" + shape).c_str(), BM_Sgemm),
          benchmark::RegisterBenchmark(("matmul_f32/" + shape).c_str(), BM_Matmul, DType::f32),
          benchmark::RegisterBenchmark(("linear_f32/" + shape).c_str(), BM_Linear),
          benchmark::RegisterBenchmark(("linear_packed/" + shape).c_str(), BM_PackedLinear),
          benchmark::RegisterBenchmark(("matmul_bf16/" + shape).c_str(), BM_Matmul, DType::bf16)})
      b->Args({m, k, n})->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();
  }
  benchmark::Initialize(&argc, argv);
  libai::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
