// The fused AdamW update (ops::adamw_update) against the memory-bandwidth bound measured in
// the same run, at 10M and 50M f32 elements on 1 and 2 threads.
//
// AdamW reads p, g, m, v and writes p, m, v: 28 bytes per element. Two bounds move bytes the
// same way with no arithmetic to speak of, on the same thread budget (parallel_for):
//   stream7  p += g, m += g, v += g over the same four arrays (the same 4 reads + 3 writes)
//   memcpy   copies (p, g) into (m, v): 16 bytes per element, read + write
// The summary gives AdamW's GB/s over the better of the two at the same size and threads.
//
//   build/bench/bench_adamw --benchmark_min_time=0.5s
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "ops/optimizer.h"
#include "runtime/rng.h"
#include "runtime/threads.h"

namespace libai {
namespace {

struct Arrays {
  Tensor p, g, m, v;
  explicit Arrays(int64_t n)
      : p(Tensor::empty({n})), g(Tensor::empty({n})), m(Tensor::empty({n})), v(Tensor::empty({n})) {
    init_uniform(p, RngKey{1, 1}, -1.0, 1.0);
    init_uniform(g, RngKey{2, 1}, -1.0, 1.0);
    init_uniform(m, RngKey{3, 1}, -0.1, 0.1);
    init_uniform(v, RngKey{4, 1}, 0.0, 0.01);
  }
};

void set_bandwidth(benchmark::State& state, double bytes) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AdamW(benchmark::State& state, int64_t n, int threads) {
  set_thread_budget(Device::cpu(0), threads);
  Arrays a(n);
  int64_t step = 1;
  for (auto _ : state) {
    ops::adamw_update(a.p, a.g, a.m, a.v,
                      {.lr = 1e-4,
                       .beta1 = 0.9,
                       .beta2 = 0.999,
                       .eps = 1e-8,
                       .weight_decay = 0.01,
                       .step = step++});
    benchmark::DoNotOptimize(a.p.data_ptr());
  }
  set_bandwidth(state, 28.0 * double(n));
}

void BM_Stream7(benchmark::State& state, int64_t n, int threads) {
  set_thread_budget(Device::cpu(0), threads);
  Arrays a(n);
  float *p = a.p.data<float>(), *m = a.m.data<float>(), *v = a.v.data<float>();
  const float* g = a.g.data<float>();
  for (auto _ : state) {
    parallel_for(0, n, int64_t(1) << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        p[i] += g[i];
        m[i] += g[i];
        v[i] += g[i];
      }
    });
    benchmark::DoNotOptimize(p);
  }
  set_bandwidth(state, 28.0 * double(n));
}

void BM_Memcpy(benchmark::State& state, int64_t n, int threads) {
  set_thread_budget(Device::cpu(0), threads);
  Arrays a(n);
  const int64_t bytes = n * 4;
  auto *p = static_cast<const char*>(a.p.data_ptr()), *g = static_cast<const char*>(a.g.data_ptr());
  auto *m = static_cast<char*>(a.m.data_ptr()), *v = static_cast<char*>(a.v.data_ptr());
  for (auto _ : state) {
    parallel_for(0, bytes, int64_t(1) << 18, [&](int64_t begin, int64_t end) {
      std::memcpy(m + begin, p + begin, size_t(end - begin));
      std::memcpy(v + begin, g + begin, size_t(end - begin));
    });
    benchmark::DoNotOptimize(m);
  }
  set_bandwidth(state, 4.0 * double(bytes));
}

// Prints the usual table, then AdamW's GB/s over the better bound at the same size/threads.
class BoundReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const std::string full = run.benchmark_name();  // "<kind>/<case>[/real_time]"
      const auto slash = full.find('/'), end = full.find('/', slash + 1);
      auto it = run.counters.find("GB/s");
      if (slash == std::string::npos || it == run.counters.end()) continue;
      const std::string kind = full.substr(0, slash), key = full.substr(slash + 1, end - slash - 1);
      double& rate = rates_[key][kind];
      if (rates_[key].size() == 1 && rate == 0) order_.push_back(key);
      rate = std::max(rate, double(it->second.value));  // best of repetitions
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf(
        "\n| case | memcpy GB/s | stream7 GB/s | adamw GB/s | adamw / bound |\n"
        "|---|---:|---:|---:|---:|\n");
    for (const auto& key : order_) {
      auto& row = rates_[key];
      const double bound = std::max(row["memcpy"], row["stream7"]);
      std::printf("| %s | %.1f | %.1f | %.1f | %.2f |\n", key.c_str(), row["memcpy"],
                  row["stream7"], row["adamw"], bound > 0 ? row["adamw"] / bound : 0.0);
    }
  }

 private:
  std::map<std::string, std::map<std::string, double>> rates_;  // case -> kind -> GB/s
  std::vector<std::string> order_;
};

}  // namespace
}  // namespace libai

int main(int argc, char** argv) {
  using namespace libai;
  const int cores = hardware_cores();
  for (int64_t n : {int64_t(10'000'000), int64_t(50'000'000)}) {
    for (int threads : {1, 2}) {
      if (threads > cores) continue;
      const std::string key = std::to_string(n / 1'000'000) + "M_t" + std::to_string(threads);
      using Fn = void (*)(benchmark::State&, int64_t, int);
      const std::pair<const char*, Fn> kinds[] = {
          {"memcpy", BM_Memcpy}, {"stream7", BM_Stream7}, {"adamw", BM_AdamW}};
      for (auto [kind, fn] : kinds)
        benchmark::RegisterBenchmark((std::string(kind) + "/" + key).c_str(), fn, n, threads)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
  }
  benchmark::Initialize(&argc, argv);
  BoundReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  set_thread_budget(Device::cpu(0), cores);
  return 0;
}
