// Activation checkpointing: the forward + backward step time and the activation memory of a
// GPT-2-small-shaped layer stack (hidden 768, 12 heads, MLP 3072, dropout 0.1 on probabilities
// and sub-layer outputs) with TrainingMode::activation_checkpoint off and on, side by side in
// one process. Memory is the CPU allocator's live bytes (runtime/allocator.h): held after the
// forward (what the backward will need) and the step's peak, both above the parameters.
//
//   bench_activation_checkpoint [layers=3] [batch=2] [seq=256] [repeats=3]
//
// The checkpointed run goes first, as the allocator's peak only grows.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "models/layers/transformer_layer.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"

using namespace libai;
using namespace libai::models;

namespace {

class Stack : public Module {
 public:
  Stack(int64_t layers, const TransformerLayerConfig& config) {
    for (int64_t i = 0; i < layers; ++i)
      layers_.push_back(&add_module("layers." + std::to_string(i),
                                    std::make_unique<TransformerLayer>(LayerContext{}, config)));
  }
  Tensor forward(const Tensor& x) const {
    Tensor h = x;
    LayerInputs in;
    in.self.causal = true;
    for (TransformerLayer* layer : layers_) h = layer->forward(h, in);
    return h;
  }

 private:
  std::vector<TransformerLayer*> layers_;
};

struct Measure {
  double seconds = 0;  // median step
  double held_mb = 0;  // live after forward, above the baseline
  double peak_mb = 0;  // peak over the steps, above the baseline
};

double mb(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

Measure measure(Stack& stack, const Tensor& x, const Tensor& w, bool checkpoint, int repeats) {
  Allocator& a = cpu_allocator();
  Measure m;
  std::vector<double> times;
  for (int r = 0; r < repeats + 1; ++r) {  // the first step warms the pools
    for (auto& [name, p] : stack.named_parameters()) p->zero_grad();
    Tensor input = x.detach().set_requires_grad(true);
    const size_t baseline = a.stats().allocated_bytes;
    const auto start = std::chrono::steady_clock::now();
    Tensor loss;
    {
      TrainingModeGuard guard(
          {.training = true, .seed = 1, .step = uint64_t(r), .activation_checkpoint = checkpoint});
      loss = ops::sum_all(stack.forward(input) * w);
    }
    const size_t held = a.stats().allocated_bytes - baseline;
    autograd::backward(loss);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) times.push_back(seconds);
    m.held_mb = mb(held);
    m.peak_mb = mb(a.stats().peak_allocated_bytes - baseline);
  }
  std::sort(times.begin(), times.end());
  m.seconds = times[times.size() / 2];
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t layers = argc > 1 ? std::atoll(argv[1]) : 3;
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 2;
  const int64_t seq = argc > 3 ? std::atoll(argv[3]) : 256;
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
  TransformerLayerConfig config;
  config.attention = {.hidden = 768, .heads = 12, .dropout = 0.1};
  config.mlp = {.hidden = 768, .intermediate = 3072, .activation = Activation::gelu_tanh};
  config.pre_norm = true;
  config.dropout = 0.1;
  Stack stack(layers, config);
  uint64_t stream = 0;
  for (auto& [name, p] : stack.named_parameters())
    init_normal(*p, RngKey{7, stream++}, name.find("norm") != std::string::npos ? 1.0 : 0.0, 0.02);
  stack.set_requires_grad(true);
  Tensor x = Tensor::empty({batch, seq, 768}), w = Tensor::empty({batch, seq, 768});
  init_normal(x, RngKey{8, 0}, 0.0, 1.0);
  init_normal(w, RngKey{8, 1}, 0.0, 1.0);

  const Measure on = measure(stack, x, w, true, repeats);
  const Measure off = measure(stack, x, w, false, repeats);
  std::printf("layers %lld, batch %lld x seq %lld, hidden 768, 12 heads, dropout 0.1, %d steps\n",
              (long long)layers, (long long)batch, (long long)seq, repeats);
  std::printf(
      "| checkpointing | step s | held after forward MB | step peak MB |\n|---|---:|---:|---:|\n");
  std::printf("| off | %.3f | %.1f | %.1f |\n", off.seconds, off.held_mb, off.peak_mb);
  std::printf("| on | %.3f | %.1f | %.1f |\n", on.seconds, on.held_mb, on.peak_mb);
  std::printf("time on/off %.2fx (goal <= 1.4x), held on/off %.2f, peak on/off %.2f\n",
              on.seconds / off.seconds, on.held_mb / off.held_mb, on.peak_mb / off.peak_mb);
  return 0;
}
