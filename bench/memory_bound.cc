// Memory-bound ops in GB/s (bytes read + written) beside memcpy of the same bytes, in one
// run, at GPT-2 small shapes with 1024 tokens (8 x 128): layer_norm and a residual add
// [1024, 768], gelu [1024, 3072], softmax [8, 12, 128, 128] (causal too), all f32. memcpy
// runs on the same thread budget as the ops (split by parallel_for), so the ratio compares
// like with like. The summary at the end gives each op's GB/s as a fraction of memcpy's at
// its shape.
//
//   build/bench/bench_memory_bound --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/softmax.h"
#include "runtime/rng.h"
#include "runtime/threads.h"

namespace libai {

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  init_uniform(t, RngKey{seed, 1}, -3.0, 3.0);
  return t;
}

void set_bandwidth(benchmark::State& state, double bytes) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Copies x into a fresh output, as an op would: read + write of x's bytes.
void BM_Memcpy(benchmark::State& state, Shape shape) {
  Tensor x = random_tensor(shape, 1);
  const auto* src = static_cast<const char*>(x.data_ptr());
  const int64_t bytes = int64_t(x.nbytes());
  for (auto _ : state) {
    Tensor out = Tensor::empty(shape);
    auto* dst = static_cast<char*>(out.data_ptr());
    parallel_for(0, bytes, 1 << 16, [&](int64_t begin, int64_t end) {
      std::memcpy(dst + begin, src + begin, size_t(end - begin));
    });
    benchmark::DoNotOptimize(dst);
  }
  set_bandwidth(state, 2.0 * double(bytes));
}

void BM_LayerNorm(benchmark::State& state, Shape shape) {
  Tensor x = random_tensor(shape, 1), w = random_tensor({shape.back()}, 2);
  Tensor b = random_tensor({shape.back()}, 3);
  for (auto _ : state) benchmark::DoNotOptimize(ops::layer_norm(x, w, b).data_ptr());
  set_bandwidth(state, 2.0 * double(x.nbytes()) + 2.0 * double(w.nbytes()));
}

// A residual add: two inputs read, one output written.
void BM_Add(benchmark::State& state, Shape shape) {
  Tensor x = random_tensor(shape, 1), y = random_tensor(shape, 2);
  for (auto _ : state) benchmark::DoNotOptimize(ops::add(x, y).data_ptr());
  set_bandwidth(state, 3.0 * double(x.nbytes()));
}

void BM_Gelu(benchmark::State& state, Shape shape, ops::GeluApprox approx) {
  Tensor x = random_tensor(shape, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::gelu(x, approx).data_ptr());
  set_bandwidth(state, 2.0 * double(x.nbytes()));
}

void BM_Softmax(benchmark::State& state, Shape shape, bool causal) {
  Tensor x = random_tensor(shape, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::softmax(x, -1, {.causal = causal}).data_ptr());
  set_bandwidth(state, 2.0 * double(x.nbytes()));
}

// Prints the usual table, then each op's GB/s over memcpy's at the same shape.
class BandwidthReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      std::string full = run.benchmark_name();  // "<op>/<shape>[/real_time]"
      auto slash = full.find('/');
      auto end = full.find('/', slash + 1);
      auto it = run.counters.find("GB/s");
      if (slash == std::string::npos || it == run.counters.end()) continue;
      std::string op = full.substr(0, slash), shape = full.substr(slash + 1, end - slash - 1);
      double& rate = rates_[shape][op];
      if (rate == 0) order_.push_back({op, shape});
      rate = std::max(rate, double(it->second.value));  // best of repetitions
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n| shape | op | GB/s | vs memcpy |\n|---|---|---:|---:|\n");
    for (const auto& [op, shape] : order_) {
      auto& row = rates_[shape];
      double rate = row[op], base = row.count("memcpy") ? row["memcpy"] : 0;
      std::printf("| %s | %s | %.1f | %.2f |\n", shape.c_str(), op.c_str(), rate,
                  base > 0 ? rate / base : 0.0);
    }
  }

 private:
  std::map<std::string, std::map<std::string, double>> rates_;  // shape -> op -> GB/s
  std::vector<std::pair<std::string, std::string>> order_;
};

}  // namespace libai

int main(int argc, char** argv) {
  using namespace libai;
  using benchmark::RegisterBenchmark;
  const Shape norm_shape{1024, 768}, gelu_shape{1024, 3072}, softmax_shape{8, 12, 128, 128};
  std::vector<benchmark::internal::Benchmark*> all = {
      RegisterBenchmark("memcpy/1024x768", BM_Memcpy, norm_shape),
      RegisterBenchmark("layer_norm/1024x768", BM_LayerNorm, norm_shape),
      RegisterBenchmark("residual_add/1024x768", BM_Add, norm_shape),
      RegisterBenchmark("memcpy/1024x3072", BM_Memcpy, gelu_shape),
      RegisterBenchmark("gelu_erf/1024x3072", BM_Gelu, gelu_shape, ops::GeluApprox::none),
      RegisterBenchmark("gelu_tanh/1024x3072", BM_Gelu, gelu_shape, ops::GeluApprox::tanh),
      RegisterBenchmark("memcpy/8x12x128x128", BM_Memcpy, softmax_shape),
      RegisterBenchmark("softmax/8x12x128x128", BM_Softmax, softmax_shape, false),
      RegisterBenchmark("softmax_causal/8x12x128x128", BM_Softmax, softmax_shape, true),
  };
  for (auto* b : all) b->Unit(benchmark::kMicrosecond)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  libai::BandwidthReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
