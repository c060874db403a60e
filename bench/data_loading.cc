// GPT-dataset batch building against the step it must hide behind: ms per micro-batch of
// 8 x 1024 tokens (sampler -> GptDataset::get -> collate), the same bytes by memcpy (the
// physical floor, measured in this run), and how long a consumer waits on the prefetcher when
// each step takes `step_ms` (default 50 ms, under a CPU GPT-2 step; a GPU step is ~100 ms).
//
//   build/bench/bench_data_loading [step_ms]
//
// The corpus is synthetic (documents of 50..2000 tokens held in memory), so this measures the
// dataset's indexing and copying, not disk reads.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "train/data/gpt_dataset.h"
#include "train/data/prefetcher.h"
#include "train/data/sampler.h"

using namespace libai;
using namespace libai::train::data;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int main(int argc, char** argv) {
  const double step_ms = argc > 1 ? std::atof(argv[1]) : 50.0;
  const int64_t micro = 8, seq = 1024, batches = 200;
  std::vector<std::vector<int64_t>> docs;
  int64_t total = 0;
  for (int64_t d = 0; total < 8'000'000; ++d) {
    std::vector<int64_t> doc(size_t(50 + (d * 7919) % 1950));
    for (size_t t = 0; t < doc.size(); ++t) doc[t] = int64_t((d * 31 + int64_t(t)) % 50257);
    total += int64_t(doc.size());
    docs.push_back(std::move(doc));
  }
  auto source = std::make_shared<InMemoryTokenSource>(std::move(docs));
  auto t0 = Clock::now();
  GptDataset dataset(source, {.seq_length = seq, .num_samples = 100'000, .seed = 1234});
  const double index_s = seconds_since(t0);

  CyclicSampler sampler(dataset.size(), {.micro_batch_size = micro});
  SampleCursor cursor(sampler, 0);
  t0 = Clock::now();
  for (int64_t b = 0; b < batches; ++b) {
    auto batch = make_batch(dataset, cursor.next());
    if (batch.at("input_ids").numel() != micro * seq) return 1;
  }
  const double batch_ms = seconds_since(t0) * 1e3 / double(batches);

  // The floor: the batch's bytes (two [8, 1024] i64 tensors) copied once from a large source.
  const size_t bytes = size_t(2 * micro * seq) * sizeof(int64_t);
  std::vector<char> from(size_t(64) << 20, 1), to(bytes);
  t0 = Clock::now();
  for (int64_t b = 0; b < batches; ++b)
    std::memcpy(to.data(), from.data() + (size_t(b) * 7919 * 4096) % (from.size() - bytes), bytes);
  const double memcpy_ms = seconds_since(t0) * 1e3 / double(batches);

  SampleCursor prefetch_cursor(sampler, 0);
  Prefetcher prefetcher(micro_batch_producer(dataset, prefetch_cursor, 40), 4);
  int64_t steps = 0;
  while (auto batch = prefetcher.next()) {
    const auto until = Clock::now() + std::chrono::duration<double, std::milli>(step_ms);
    while (Clock::now() < until) {
    }
    ++steps;
  }
  std::string cpu = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  std::printf("cpu %s\n", cpu.c_str());
  std::printf("nproc %u, corpus %lld tokens in %zu docs, %lld samples, %lld epochs\n",
              std::thread::hardware_concurrency(), (long long)total, size_t(source->size()),
              (long long)dataset.size(), (long long)dataset.num_epochs());
  std::printf("index build: %.1f ms\n", index_s * 1e3);
  std::printf(
      "batch %lld x %lld: %.3f ms/batch; memcpy of its bytes %.4f ms (%.2fx); "
      "%.2f%% of a %.0f ms step\n",
      (long long)micro, (long long)seq, batch_ms, memcpy_ms, batch_ms / memcpy_ms,
      100 * batch_ms / step_ms, step_ms);
  std::printf(
      "prefetcher: %lld steps of %.0f ms, consumer waited %.3f ms in total "
      "(%.3f ms/step; the first batch included)\n",
      (long long)steps, step_ms, prefetcher.wait_seconds() * 1e3,
      prefetcher.wait_seconds() * 1e3 / double(steps));
  return 0;
}
