// ZeRO's memory and step time per rank: a GPT-2-shaped model trained by train::StageStep on dp
// forked processes (shm communicators), at ZeRO 0, 1, 2 and 3 and dp 2 and 4. Per rank: the
// peak of the bytes tensors hold during a step (as requested: runtime/memory_stats.h) above
// what the process held before the model was built, against the formulas of Note [ZeRO
// partitions] (train::zero_state_bytes); and the median step time against ZeRO-0's at the
// same dp, measured in the same run. Activations are kept small on purpose (one sequence of 16
// tokens) so that the peak is the model states plus what is in flight.
//
//   bench_zero_memory [--layers 8] [--hidden 512] [--vocab 2048] [--seq 16] [--steps 5]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/summary.h"
#include "models/init.h"
#include "models/model.h"
#include "runtime/comm/spmd.h"
#include "runtime/memory_stats.h"
#include "runtime/threads.h"
#include "train/pipeline_eager.h"

namespace libai {
namespace {

struct Options {
  int layers = 8, hidden = 512, vocab = 2048, seq = 16, steps = 5;
};

// Per rank: peak bytes above the baseline, median step seconds; the model's counts.
struct Figures {
  double peak = 0, step = 0, params = 0, largest_layer = 0, rest = 0, activations = 0;
};

void rank_body(comm::Communicator& c, const Options& o, int dp, int zero) {
  set_thread_budget(Device::cpu(0), 1);
  std::shared_ptr<comm::Communicator> world(&c, [](comm::Communicator*) {});
  const double base = double(cpu_requested_bytes());
  auto config = models::HfConfig::from_json({{"model_type", "gpt2"},
                                             {"architectures", {"GPT2LMHeadModel"}},
                                             {"vocab_size", o.vocab},
                                             {"n_embd", o.hidden},
                                             {"n_head", 4},
                                             {"n_layer", o.layers},
                                             {"n_positions", o.seq},
                                             {"tie_word_embeddings", true}});
  auto model = models::create_model(config, {}, train::virtual_stage_parts(o.layers, 1)[0]);
  models::init_parameters(*model, 7);
  model->set_requires_grad(true);
  const train::PipelineRankSetup setup = train::make_pipeline_rank(world, {.dp = dp, .pp = 1, .tp = 1});
  std::vector<models::Model*> parts{model.get()};
  auto optimizer = train::make_optimizer(train::stage_param_groups(parts, {.lr = 1e-4}), {});
  const train::StageLayout layout{.dp = dp, .dp_rank = setup.coordinates.dp, .micro_batch_size = 1};
  train::StageStep step(parts, *optimizer, nullptr,
                        {.num_accumulation_steps = 1, .clip_grad_max_norm = 1.0, .dropout = false,
                         .zero_stage = zero},
                        layout, setup.groups);
  train::EagerPipelineRank rank(step, train::pipeline_program("1f1b", 1, 1, 1)[0], layout, nullptr);
  std::vector<int64_t> ids(size_t(o.seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7919 + 13 * size_t(c.rank())) % size_t(o.vocab));
  const models::TensorMap batch{{"input_ids", Tensor::from_vector(ids, {1, o.seq})}};
  rank.run({batch});  // the optimizer's state exists from here
  // Each measured step by hand (one micro-batch, one stage: forward, backward, end): the
  // activations a forward stashes are measured apart, as the bytes live after it.
  std::vector<double> times;
  double peak = 0, activations = 0;
  for (int s = 0; s < o.steps; ++s) {
    const double before = double(cpu_requested_bytes());
    reset_cpu_requested_peak();
    const auto t0 = std::chrono::steady_clock::now();
    step.forward(0, 0, batch, {});
    activations = std::max(activations, double(cpu_requested_bytes()) - before);
    step.backward(0, 0, {});
    step.end_step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    peak = std::max(peak, double(cpu_requested_peak_bytes()) - base);
  }
  // The units (Note [ZeRO partitions]): a layer's parameters, and the rest (embeddings, final
  // norm), counted from the model as the formulas' inputs.
  double layer = 0, rest = 0;
  for (auto& [name, t] : model->named_parameters())
    (name.find(".0.") != std::string::npos ? layer : rest) += double(t->numel());
  rest -= layer * (o.layers - 1);
  const Figures mine{peak, bench::summarize(times).median, double(model->parameter_count()),
                     layer, rest, activations};
  constexpr int64_t kFields = 6;
  Tensor all = Tensor::empty({kFields * int64_t(c.size())}, DType::f64);
  c.all_gather(Tensor::from_vector<double>({mine.peak, mine.step, mine.params, mine.largest_layer,
                                            mine.rest, mine.activations}),
               all);
  if (c.rank() != 0) return;
  const std::vector<double> v = all.to_vector<double>();
  double worst = 0, slowest = 0, stash = 0;
  for (int r = 0; r < c.size(); ++r) {
    worst = std::max(worst, v[size_t(kFields * r)]);
    slowest = std::max(slowest, v[size_t(kFields * r + 1)]);
    stash = std::max(stash, v[size_t(kFields * r + 5)]);
  }
  const train::ZeroMemory f =
      train::zero_state_bytes(zero, dp, mine.params, mine.largest_layer, mine.rest);
  std::printf("| %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.1f |\n",
              zero, dp, f.parameters / 1e6, f.gradients / 1e6, f.optimizer / 1e6,
              f.in_flight / 1e6, f.total() / 1e6, stash / 1e6, worst / 1e6,
              worst / (f.total() + stash), slowest * 1e3);
  std::fflush(stdout);
}

}  // namespace
}  // namespace libai

int main(int argc, char** argv) {
  using namespace libai;
  Options o;
  CLI::App app{"ZeRO memory per rank against the formulas, and step time"};
  app.add_option("--layers", o.layers);
  app.add_option("--hidden", o.hidden);
  app.add_option("--vocab", o.vocab);
  app.add_option("--seq", o.seq);
  app.add_option("--steps", o.steps);
  CLI11_PARSE(app, argc, argv);
  std::printf("GPT-2 shape: %d layers, hidden %d, vocab %d, 1 x %d tokens a step; AdamW f32\n",
              o.layers, o.hidden, o.vocab, o.seq);
  std::printf("MB = 1e6 bytes; peak = the most bytes tensors held during a step above the "
              "process's baseline (worst rank)\n\n");
  std::printf("| ZeRO | dp | params MB | grads MB | optimizer MB | in flight MB | formula MB | "
              "activations MB | peak MB | peak / (formula + activations) | step ms |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (int dp : {2, 4})
    for (int zero = 0; zero <= 3; ++zero) {
      std::fprintf(stderr, "[zero_memory] ZeRO-%d at dp %d ...\n", zero, dp);
      comm::run_spmd_processes(
          dp, [&](comm::Communicator& c) { rank_body(c, o, dp, zero); }, std::chrono::seconds(300),
          "shm");
    }
  return 0;
}
