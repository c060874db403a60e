// One training step of a causal LM (forward, loss, backward, clipping, AdamW), the
// LiBai-Actor side of bench/run_train_bench.sh (the PyTorch side is bench/peer_train_step.py,
// same flags, same JSON). One process loads the model folder, runs `--warmup` untimed steps
// and `--reps` timed ones on the same batch, and prints one JSON line: the median step time,
// tokens/s and the process's peak RSS (ru_maxrss).
//
//   build/bench/bench_train_step --model DIR --batch 4 --seq 256 --reps 3
//   build/bench/bench_train_step --model DIR --checkpoint      # activation checkpointing
//   build/bench/bench_train_step --model DIR --amp bf16        # bf16 autocast
//   build/bench/bench_train_step --model DIR --dropout 0       # dropout off (else config.json's)
#include <CLI/CLI.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/allocator.h"
#include "runtime/progress.h"
#include "runtime/threads.h"
#include "train/train_step.h"

namespace {

using namespace libai;
using Clock = std::chrono::steady_clock;

// The same ids on both sides (peer_train_step.py computes them alike).
int64_t input_id(int64_t b, int64_t s, int64_t vocab) { return (s * 7919 + b * 104729 + 13) % vocab; }

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"one training step of a causal LM, timed"};
  std::string model_dir, amp = "f32";
  int64_t batch = 4, seq = 256, reps = 3, warmup = 1;
  int threads = 0;
  bool checkpoint = false;
  double dropout = -1;
  app.add_option("--model", model_dir)->required();
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--reps", reps);
  app.add_option("--warmup", warmup);
  app.add_option("--threads", threads);
  app.add_option("--amp", amp)->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--dropout", dropout, "0: dropout off; default: the model's config");
  app.add_flag("--checkpoint", checkpoint);
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) set_thread_budget(Device::cpu(), threads);
    const auto t0 = Clock::now();
    auto model = models::load_model(model_dir);
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const int64_t vocab = model->config().require_int("vocab_size");
    std::vector<int64_t> ids(size_t(batch * seq));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s) ids[size_t(b * seq + s)] = input_id(b, s, vocab);
    models::TensorMap inputs{{"input_ids", Tensor::from_vector(ids, {batch, seq})}};

    model->set_requires_grad(true);
    auto optimizer = train::make_optimizer(train::default_param_groups(*model, {.lr = 1e-4, .weight_decay = 0.01}), {});
    train::TrainStepOptions options;
    options.clip_grad_max_norm = 1.0;
    options.activation_checkpoint = checkpoint;
    options.autocast = amp == "bf16" ? DType::bf16 : DType::f32;
    options.dropout = dropout != 0.0;
    train::TrainStep step(*model, *optimizer, nullptr, options);
    for (int64_t i = 0; i < warmup; ++i) step.run({inputs});
    Progress progress("train step", reps * batch * seq, "tok", 2.0);
    std::vector<double> seconds;
    double loss = 0;
    for (int64_t i = 0; i < reps; ++i) {
      const auto start = Clock::now();
      const auto before = cpu_allocator().stats();
      loss = step.run({inputs}).loss;
      seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      const auto after = cpu_allocator().stats();
      std::fprintf(stderr, "step %lld: %.0f ms, pool misses %llu (hits %llu), cached %.0f MiB, peak %.0f MiB\n",
                   (long long)i, seconds.back() * 1e3,
                   (unsigned long long)(after.pool_misses - before.pool_misses),
                   (unsigned long long)(after.pool_hits - before.pool_hits), double(after.cached_bytes) / 1048576.0,
                   double(after.peak_allocated_bytes) / 1048576.0);
      progress.advance(batch * seq);
    }
    std::vector<double> sorted = seconds;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    std::printf(
        "{\"impl\": \"libai\", \"batch\": %lld, \"seq\": %lld, \"amp\": \"%s\", \"checkpoint\": %s, "
        "\"threads\": %d, \"reps\": %lld, \"median_ms\": %.1f, \"min_ms\": %.1f, \"max_ms\": %.1f, "
        "\"tokens_per_s\": %.1f, \"peak_rss_mib\": %.1f, \"load_s\": %.2f, \"last_loss\": %.5f}\n",
        (long long)batch, (long long)seq, amp.c_str(), checkpoint ? "true" : "false",
        thread_budget(Device::cpu()), (long long)reps, median * 1e3, sorted.front() * 1e3,
        sorted.back() * 1e3, double(batch * seq) / median, peak_rss_mib(), load_s, loss);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  }
}
