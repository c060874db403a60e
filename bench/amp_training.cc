// One GPT-2 training micro-step (forward, causal-LM loss, backward) in f32 against the same step
// under autocast bf16 (models/training_mode.h; Note [Autocast] in models/layers/linear.cc), side
// by side in one run on the same random weights and tokens. GPT-2 small's layer shapes (hidden
// 768, 12 heads, vocabulary 50257) with fewer layers; batch x seq tokens.
//
//   build/bench/bench_amp_training --layers 2 --batch 4 --seq 256 --reps 3 --threads 2
//
// Prints each mode's median seconds per step (min-max), tokens/s, the speed-up over f32 and
// the two losses (they differ by bf16 rounding only).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/summary.h"
#include "models/gpt2/gpt2.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"
#include "runtime/threads.h"

namespace libai {
namespace {

struct Options {
  int64_t layers = 2, batch = 4, seq = 256, vocab = 50257;
  int reps = 3, threads = 2;
};

}  // namespace
}  // namespace libai

int main(int argc, char** argv) {
  using namespace libai;
  Options o;
  CLI::App app{"GPT-2 training step: f32 against autocast bf16"};
  app.add_option("--layers", o.layers);
  app.add_option("--batch", o.batch);
  app.add_option("--seq", o.seq);
  app.add_option("--vocab", o.vocab);
  app.add_option("--reps", o.reps);
  app.add_option("--threads", o.threads);
  CLI11_PARSE(app, argc, argv);
  set_thread_budget(Device::cpu(0), o.threads);

  auto config = models::HfConfig::from_json({{"model_type", "gpt2"},
                                             {"architectures", {"GPT2LMHeadModel"}},
                                             {"vocab_size", o.vocab},
                                             {"n_embd", 768},
                                             {"n_head", 12},
                                             {"n_layer", o.layers},
                                             {"n_positions", o.seq}});
  auto model = models::make_gpt2_lm(config, models::LayerContext{});
  uint64_t stream = 0;
  for (auto& [name, tensor] : model->named_parameters())
    init_normal(*tensor, RngKey{7, ++stream}, 0.0, 0.02);
  model->set_requires_grad(true);

  std::vector<int64_t> ids(size_t(o.batch * (o.seq + 1)));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int64_t(uniform(RngKey{8, 0}, i) * float(o.vocab)) % o.vocab;
  Tensor all = Tensor::from_vector(ids, {o.batch, o.seq + 1});
  Tensor input = ops::contiguous(ops::narrow(all, 1, 0, o.seq));
  Tensor target = ops::reshape(ops::contiguous(ops::narrow(all, 1, 1, o.seq)), {o.batch * o.seq});

  auto step = [&](DType autocast) {
    models::TrainingModeGuard guard({.training = true, .autocast = autocast});
    Tensor logits = model->forward({{"input_ids", input}}).at("logits");  // [b, s, vocab]
    Tensor loss = ops::cross_entropy(ops::reshape(logits, {o.batch * o.seq, o.vocab}), target);
    autograd::backward(loss);
    for (auto& [name, tensor] : model->named_parameters()) tensor->zero_grad();
    return loss.item<double>();
  };
  std::printf(
      "GPT-2, hidden 768, 12 heads, %lld layers, vocab %lld, batch %lld x seq %lld, "
      "%d threads\n\n",
      (long long)o.layers, (long long)o.vocab, (long long)o.batch, (long long)o.seq, o.threads);
  std::printf(
      "| mode | s/step median (min-max) | tokens/s | vs f32 | loss |\n|---|---|---:|---:|---:|\n");
  double f32_median = 0;
  for (DType mode : {DType::f32, DType::bf16}) {
    double loss = step(mode);  // warm-up (allocations, oneDNN primitives)
    std::vector<double> seconds;
    for (int r = 0; r < o.reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      loss = step(mode);
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    auto s = bench::summarize(seconds);
    if (mode == DType::f32) f32_median = s.median;
    std::printf("| %s | %.3f (%.3f-%.3f) | %.0f | %.2f | %.5f |\n",
                mode == DType::f32 ? "f32" : "autocast bf16", s.median, s.min, s.max,
                double(o.batch * o.seq) / s.median, f32_median / s.median, loss);
    std::fflush(stdout);
  }
  return 0;
}
