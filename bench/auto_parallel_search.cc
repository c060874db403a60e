// How long the auto-parallel search takes (schedule/auto_parallel.h) for a GPT-3-shaped model of
// 96 layers on 1024 devices (128 nodes of 8), every layout estimated by compiling its plan and
// simulating its step; and what it chooses there on A100-like what-if devices. The devices and
// links are assumptions written below (not measured here), so the chosen layout is a what-if,
// not a claim about any cluster.
//
//   build/bench/bench_auto_parallel_search [--repeats N]
//   build/bench/bench_auto_parallel_search --megatron     # Megatron-LM's table as what-ifs
//   build/bench/bench_auto_parallel_search --libai        # LiBai's benchmark tables likewise
#include <algorithm>
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

// LiBai's benchmark tables (docs/source/tutorials/get_started/Benchmark.md of Oneflow-Inc/libai,
// v0.2.0: BERT of sequences of 512 and GPT-2 of 1024, 24 layers (48 for 8 stages), width 1024,
// 16 heads, fp16, 8 GPUs a node; the GPU model is not stated there): each published layout
// (d x m x p, micro-batch, global batch, checkpointing) and its LiBai samples/s, beside the
// search's choice for the same cluster, global batch and checkpointing on the what-if devices
// above, and the search's prediction for the published layout itself (1F1B, even split, no
// ZeRO). Where the table has several layouts for one cluster and batch, the search's order of
// them can be set against the measured order.
void libai_table() {
  struct Row {
    const char* model;
    int layers, d, m, p;
    bool checkpointing;
    int mb, gb, gpus;
    double samples;  // LiBai's, published
  };
  const Row rows[] = {
      {"BERT", 24, 1, 1, 1, false, 24, 24, 1, 46.91},
      {"BERT", 24, 4, 1, 1, false, 16, 64, 4, 176.88},
      {"BERT", 24, 8, 1, 1, false, 16, 128, 8, 351.57},
      {"BERT", 24, 16, 1, 1, false, 16, 256, 16, 675.87},
      {"BERT", 24, 32, 1, 1, false, 16, 512, 32, 1207.65},
      {"BERT", 24, 1, 1, 1, true, 128, 1024, 1, 35.74},
      {"BERT", 24, 1, 4, 1, true, 128, 1024, 4, 87.12},
      {"BERT", 24, 1, 1, 4, true, 128, 1024, 4, 103.6},
      {"BERT", 24, 1, 8, 1, true, 128, 1024, 8, 131.94},
      {"BERT", 48, 1, 1, 8, true, 64, 1024, 8, 94.4},
      {"BERT", 24, 2, 2, 1, true, 128, 2048, 4, 88.47},
      {"BERT", 24, 4, 2, 1, true, 128, 4096, 8, 175.94},
      {"BERT", 24, 8, 2, 1, true, 128, 8192, 16, 348.58},
      {"BERT", 24, 2, 8, 1, true, 128, 2048, 16, 261.78},
      {"BERT", 24, 4, 4, 1, true, 128, 2048, 16, 338.97},
      {"BERT", 24, 2, 2, 4, true, 128, 2048, 16, 267.39},
      {"BERT", 24, 2, 1, 4, true, 128, 2048, 8, 207.31},
      {"BERT", 24, 4, 1, 4, true, 128, 4096, 16, 406.24},
      {"BERT", 24, 8, 1, 4, true, 128, 8192, 32, 805.04},
      {"BERT", 24, 4, 2, 4, true, 192, 6144, 32, 503.51},
      {"BERT", 24, 2, 4, 4, true, 256, 4096, 32, 405.75},
      {"GPT-2", 24, 1, 1, 1, false, 6, 6, 1, 17.52},
      {"GPT-2", 24, 4, 1, 1, false, 4, 16, 4, 63.45},
      {"GPT-2", 24, 8, 1, 1, false, 4, 32, 8, 125.64},
      {"GPT-2", 24, 16, 1, 1, false, 4, 64, 16, 215.35},
      {"GPT-2", 24, 32, 1, 1, false, 4, 128, 32, 329.58},
      {"GPT-2", 24, 1, 4, 1, false, 6, 6, 4, 40.38},
      {"GPT-2", 24, 1, 8, 1, false, 8, 8, 8, 60.53},
      {"GPT-2", 24, 1, 1, 1, true, 32, 256, 1, 14.43},
      {"GPT-2", 24, 1, 1, 4, true, 32, 256, 4, 41.9},
      {"GPT-2", 48, 1, 1, 8, true, 24, 384, 8, 37.4},
      {"GPT-2", 24, 2, 2, 1, true, 32, 512, 4, 37.63},
      {"GPT-2", 24, 4, 2, 1, true, 32, 1024, 8, 74.35},
      {"GPT-2", 24, 8, 2, 1, true, 32, 2048, 16, 148.94},
      {"GPT-2", 24, 2, 8, 1, true, 32, 512, 16, 116.04},
      {"GPT-2", 24, 4, 4, 1, true, 32, 512, 16, 141.25},
      {"GPT-2", 24, 2, 1, 4, true, 32, 512, 8, 83.12},
      {"GPT-2", 24, 4, 1, 4, true, 32, 1024, 16, 164.23},
      {"GPT-2", 24, 8, 1, 4, true, 32, 2048, 32, 322.42},
      {"GPT-2", 24, 2, 2, 4, true, 32, 1024, 16, 128.77},
      {"GPT-2", 24, 4, 2, 4, true, 48, 1536, 32, 209.32},
      {"GPT-2", 24, 2, 4, 4, true, 64, 1024, 32, 186.67},
  };
  std::printf(
      "\n| model, GPUs, global batch, checkpointing | published layout (d x m x p, mb) | "
      "LiBai samples/s | predicted for it | chosen layout | predicted samples/s | "
      "chosen / published layout (predicted) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const bool bert = r.model[0] == 'B';
    const double s = bert ? 512 : 1024, v = bert ? 30522 : 50257;
    const int per_node = std::min(r.gpus, 8);
    const TrainCostModel model = gpt(r.layers, 1024, 16, s, v, r.gpus, per_node, r.gb);
    SearchSpace space{.devices = r.gpus, .devices_per_node = per_node, .num_layers = r.layers,
                      .global_batch = r.gb, .heads = 16};
    space.constraints.activation_checkpoint = r.checkpointing;
    EstimateCache cache;
    const SearchResult free = search_parallel(
        space, [&](const ParallelChoice& c) { return estimate_training(model, c, cache); });
    const ParallelChoice published{.dp = r.d, .tp = r.m, .pp = r.p, .micro_batch_size = r.mb,
                                   .accumulation = r.gb / (r.mb * r.d), .zero_stage = 0,
                                   .activation_checkpoint = r.checkpointing};
    const ParallelEstimate theirs = estimate_training(model, published);
    const double chosen = free.ranked.empty() ? 0 : free.ranked[0].estimate.samples_per_second;
    std::printf("| %s%s, %d, %d, %s | %dx%dx%d, mb %d | %.2f | %.1f%s | %s | %.1f | %.2f |\n",
                r.model, r.layers == 48 ? " (48 layers)" : "", r.gpus, r.gb,
                r.checkpointing ? "on" : "off", r.d, r.m, r.p, r.mb, r.samples,
                theirs.samples_per_second, theirs.fits() ? "" : " (does not fit)",
                free.ranked.empty() ? "none fits" : describe(free.ranked[0].choice).c_str(), chosen,
                theirs.samples_per_second > 0 ? chosen / theirs.samples_per_second : 0.0);
    std::fflush(stdout);
  }
}

int main(int argc, char** argv) {
  int repeats = 3;
  bool megatron = false, libai = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--megatron") == 0) megatron = true;
    if (std::strcmp(argv[i], "--libai") == 0) libai = true;
  }
  if (megatron) {
    megatron_table();
    return 0;
  }
  if (libai) {
    libai_table();
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
