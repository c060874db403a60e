// How long the auto-parallel search takes (schedule/auto_parallel.h) for a GPT-3-shaped model of
// 96 layers on 1024 devices (128 nodes of 8), every layout estimated by compiling its plan and
// simulating its step; and what it chooses there on A100-like what-if devices. The devices and
// links are assumptions written below (not measured here), so the chosen layout is a what-if,
// not a claim about any cluster.
//
//   build/bench/bench_auto_parallel_search [--repeats N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/summary.h"
#include "schedule/auto_parallel.h"

namespace {

using namespace libai::schedule;

// A GPT of `layers` layers, width h, `heads` heads, sequences of s tokens, vocabulary v, in 16
// bits: per layer and sample, forward flops 24 s h^2 + 4 s^2 h, 12 h^2 + 13 h parameters,
// Korthikanti et al.'s activations s h (34 + 5 a s / h) bytes, a hidden state of 2 s h bytes.
TrainCostModel gpt(int layers, double h, double heads, double s, double v, int devices,
                   int per_node, int64_t batch) {
  TrainCostModel m;
  for (int l = 0; l < layers; ++l) {
    m.layer_flops.push_back(24 * s * h * h + 4 * s * s * h);
    m.layer_parameters.push_back(12 * h * h + 13 * h);
    m.layer_activation_bytes.push_back(s * h * (34 + 5 * heads * s / h));
    m.layer_output_bytes.push_back(2 * s * h);
  }
  m.embedding_parameters = (v + s) * h;
  m.embedding_bytes = 2 * s * h;
  m.head_flops = 2 * s * h * v;
  m.head_parameters = v * h + 2 * h;
  m.bytes_per_parameter = 2;
  // A100-like: half of 312 TFLOP/s sustained in 16 bits, 2 TB/s, 80 GB; NVLink inside a node,
  // 200 Gb/s per device between nodes.
  m.devices.assign(size_t(devices), {.gflops = 156e3, .gbs = 2039, .memory_bytes = 80e9});
  m.devices_per_node = per_node;
  m.intra_node = {.bandwidth_gbs = 300, .latency_seconds = 5e-6};
  m.inter_node = {.bandwidth_gbs = 25, .latency_seconds = 1e-5};
  m.global_batch = batch;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 3;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[i + 1]);
  struct Case {
    const char* name;
    int layers;
    double hidden, heads, seq, vocab;
    int devices, per_node;
    int64_t batch;
  };
  const Case cases[] = {
      {"GPT-3 175B shape, 1024 devices", 96, 12288, 96, 2048, 51200, 1024, 8, 1536},
      {"GPT-2 1.5B shape, 64 devices", 48, 1600, 25, 1024, 50257, 64, 8, 512},
  };
  std::printf("| case | layouts estimated | fit | search time (median of %d, min-max) | chosen (what-if) | predicted samples/s |\n",
              repeats);
  std::printf("|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    const TrainCostModel model =
        gpt(c.layers, c.hidden, c.heads, c.seq, c.vocab, c.devices, c.per_node, c.batch);
    const SearchSpace space{.devices = c.devices,
                            .devices_per_node = c.per_node,
                            .num_layers = c.layers,
                            .global_batch = c.batch,
                            .heads = int64_t(c.heads)};
    std::vector<double> seconds;
    SearchResult result;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      result = search_parallel(space, [&](const ParallelChoice& choice) {
        return estimate_training(model, choice);
      });
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      std::fprintf(stderr, "%s: search %d/%d took %.2f s\n", c.name, r + 1, repeats, seconds.back());
    }
    const auto s = libai::bench::summarize(seconds);
    std::printf("| %s | %lld | %zu | %.2f s (%.2f-%.2f) | %s | %.1f |\n", c.name,
                static_cast<long long>(result.evaluated), result.ranked.size(), s.median, s.min,
                s.max, result.ranked.empty() ? "none fits" : describe(result.ranked[0].choice).c_str(),
                result.ranked.empty() ? 0.0 : result.ranked[0].estimate.samples_per_second);
  }
  return 0;
}
