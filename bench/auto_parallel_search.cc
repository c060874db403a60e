// How long the auto-parallel search takes (schedule/auto_parallel.h) for a GPT-3-shaped model of
// 96 layers on 1024 devices (128 nodes of 8), every layout estimated by compiling its plan and
// simulating its step; and what it chooses there on A100-like what-if devices. The devices and
// links are assumptions written below (not measured here), so the chosen layout is a what-if,
// not a claim about any cluster.
//
//   build/bench/bench_auto_parallel_search [--repeats N]
//   build/bench/bench_auto_parallel_search --megatron     # Megatron-LM's table as what-ifs
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

// Megatron-LM's weak-scaling table (Narayanan et al. 2021, Table 1: GPT, vocabulary 51200,
// sequences of 2048, A100 80 GB, 8 per node, activation recomputation): the published layout
// and throughput beside the search's, on the same what-if devices at their peak (312 TFLOP/s,
// 2039 GB/s). Throughput in TFLOP/s per GPU by the paper's count, F = 96 B s l h^2 (1 + s/(6h) +
// V/(16 l h)) per step (recomputation included), over the step time and the GPUs.
void megatron_table() {
  struct Row {
    double billions;
    int heads, hidden, layers, t, p, gpus, batch;
    double tflops;  // published, per GPU
  };
  const Row rows[] = {{1.7, 24, 2304, 24, 1, 1, 32, 512, 137},
                      {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},
                      {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},
                      {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
                      {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},
                      {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},
                      {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148},
                      {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
                      {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163},
                      {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163}};
  std::printf("\n| model (published t, p) | published TF/s/GPU | chosen layout | predicted TF/s/GPU | "
              "best with the published t, p | predicted TF/s/GPU | search |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double h = r.hidden, s = 2048, v = 51200, l = r.layers;
    TrainCostModel model = gpt(r.layers, h, r.heads, s, v, r.gpus, 8, r.batch);
    for (auto& d : model.devices) d.gflops = 312e3;  // the peak: what the published % refers to
    const double flops = 96.0 * r.batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
    const auto tflops = [&](const SearchResult& x) {
      return x.ranked.empty() ? 0.0 : flops / x.ranked[0].estimate.step_seconds / r.gpus / 1e12;
    };
    SearchSpace space{.devices = r.gpus, .devices_per_node = 8, .num_layers = r.layers,
                      .global_batch = r.batch, .heads = r.heads};
    space.constraints.activation_checkpoint = true;  // as the published runs
    const auto start = std::chrono::steady_clock::now();
    EstimateCache cache;
    const SearchResult free = search_parallel(space, [&](const ParallelChoice& c) {
      return estimate_training(model, c, cache);
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    space.constraints.tp = r.t;
    space.constraints.pp = r.p;
    const SearchResult published = search_parallel(space, [&](const ParallelChoice& c) {
      return estimate_training(model, c, cache);
    });
    std::printf("| %.1fB (t %d, p %d, %d GPUs) | %.0f | %s | %.0f | %s | %.0f | %.1f s |\n", r.billions,
                r.t, r.p, r.gpus, r.tflops,
                free.ranked.empty() ? "none fits" : describe(free.ranked[0].choice).c_str(),
                tflops(free), published.ranked.empty() ? "none fits" : describe(published.ranked[0].choice).c_str(),
                tflops(published), seconds);
    std::fflush(stdout);
  }
}

int main(int argc, char** argv) {
  int repeats = 3;
  bool megatron = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--megatron") == 0) megatron = true;
  }
  if (megatron) {
    megatron_table();
    return 0;
  }
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
      EstimateCache cache;
      result = search_parallel(space, [&](const ParallelChoice& choice) {
        return estimate_training(model, choice, cache);
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
