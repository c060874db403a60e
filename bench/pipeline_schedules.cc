// Pipeline training schedules from the simulator alone (schedule/, no actors, no devices):
// the bubble of GPipe, 1F1B and interleaved 1F1B against the closed forms, and the
// activations each schedule stashes per stage. Measured actor-runtime figures are
// bench_pipeline_overhead's and run_pipeline_bench.py's.
//
//   build/bench/bench_pipeline_schedules [--stages 4] [--forward-ms 2] [--backward-ms 4]
//                                        [--transfer-ms 0.1]
//
// m = 2p, 4p, 8p (8, 16, 32 at p = 4: interleaving needs multiples of p). Each device's
// micro-batch costs f forward and b backward, split evenly over its v chunks
// when interleaved. Bubble = 1 - mean busy / step time (measured_bubble_fraction), against
// (p-1)/(v m+p-1) (ideal_bubble_fraction; v = 1 for GPipe and 1F1B) and, for interleaved,
// Megatron's (p-1)/(v m) (idle time over the ideal time m (f + b)). The "with transfers"
// column adds a hop of --transfer-ms between devices (none between chunks of one device).
// Peak stash: micro-batches of the stage's layers whose activations wait for their backward at
// once (interleaved: chunks / v). The last table times the simulator on large pipelines.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "schedule/program.h"

namespace libai::schedule {
namespace {

struct Schedule {
  std::string name;
  int chunks;  // 0: GPipe; 1: 1F1B; v > 1: interleaved over v chunks
};

PipelineProgram program_of(const Schedule& s, int p, int m) {
  if (s.chunks == 0) return gpipe(p, m);
  return interleaved_one_f_one_b(p, m, s.chunks);  // one chunk: 1F1B
}

StageCosts costs_of(int p, int v, double f, double b, double transfer) {
  v = std::max(v, 1);
  return StageCosts{.forward = std::vector<double>(size_t(p * v), f / v),
                    .backward = std::vector<double>(size_t(p * v), b / v),
                    .transfer = transfer};
}

int run(int p, double f, double b, double transfer) {
  const std::vector<Schedule> schedules = {
      {"GPipe", 0}, {"1F1B", 1}, {"interleaved v=2", 2}, {"interleaved v=4", 4}};
  std::printf("p = %d, f = %.3g ms, b = %.3g ms per device and micro-batch, transfer %.3g ms\n\n",
              p, f * 1e3, b * 1e3, transfer * 1e3);
  std::printf(
      "| schedule | m | step ms | bubble | (p-1)/(v m+p-1) | Megatron (p-1)/(v m) | step ms with "
      "transfers | bubble with transfers |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Schedule& s : schedules)
    for (int m : {2 * p, 4 * p, 8 * p}) {
      const int v = std::max(s.chunks, 1);
      const PipelineProgram program = program_of(s, p, m);
      const Timeline t = simulate(program, costs_of(p, v, f, b, 0.0), buffer_quota(program));
      const Timeline slow =
          simulate(program, costs_of(p, v, f, b, transfer), buffer_quota(program));
      std::printf("| %s | %d | %.2f | %.1f%% | %.1f%% | %.1f%% | %.2f | %.1f%% |\n", s.name.c_str(),
                  m, t.step_time * 1e3, 100 * measured_bubble_fraction(t),
                  100 * ideal_bubble_fraction(p, m, v), 100 * megatron_bubble_ratio(p, m, v),
                  slow.step_time * 1e3, 100 * measured_bubble_fraction(slow));
    }

  std::printf("\nPeak stashed activations per stage, in micro-batches of the stage's layers\n\n");
  std::printf("| schedule | m |");
  for (int s = 0; s < p; ++s) std::printf(" stage %d |", s);
  std::printf(" stage 0 / p |\n|---|---:|");
  for (int s = 0; s <= p; ++s) std::printf("---:|");
  std::printf("\n");
  for (const Schedule& s : schedules)
    for (int m : {2 * p, 4 * p, 8 * p}) {
      const int v = std::max(s.chunks, 1);
      const std::vector<int> stash = peak_stashed_activations(program_of(s, p, m));
      std::printf("| %s | %d |", s.name.c_str(), m);
      for (int x : stash) std::printf(" %.2f |", double(x) / v);
      std::printf(" %.2f |\n", double(stash[0]) / v / p);
    }

  std::printf("\nSimulator time (one replay with quotas, 1F1B and interleaved v=4)\n\n");
  std::printf(
      "| stages | micro-batches | actions (1F1B; x4 interleaved) | 1F1B ms | interleaved v=4 ms "
      "|\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (int stages : {64, 256, 512}) {
    const int m = stages * 2;
    double ms[2];
    for (int i = 0; i < 2; ++i) {
      const int v = i == 0 ? 1 : 4;
      const PipelineProgram program = interleaved_one_f_one_b(stages, m, v);
      const StageCosts c = costs_of(stages, v, f, b, transfer);
      const std::vector<int> quota = buffer_quota(program);
      const auto start = std::chrono::steady_clock::now();
      simulate(program, c, quota);
      ms[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
    }
    std::printf("| %d | %d | %lld | %.0f | %.0f |\n", stages, m, 2LL * stages * m, ms[0], ms[1]);
  }
  return 0;
}

}  // namespace
}  // namespace libai::schedule

int main(int argc, char** argv) {
  CLI::App app{"pipeline training schedules from the simulator"};
  int stages = 4;
  double forward_ms = 2, backward_ms = 4, transfer_ms = 0.1;
  app.add_option("--stages", stages, "pipeline stages (devices)")->check(CLI::Range(2, 64));
  app.add_option("--forward-ms", forward_ms, "forward ms per device and micro-batch");
  app.add_option("--backward-ms", backward_ms, "backward ms per device and micro-batch");
  app.add_option("--transfer-ms", transfer_ms, "ms per hop between devices (second column)");
  CLI11_PARSE(app, argc, argv);
  return libai::schedule::run(stages, forward_ms * 1e-3, backward_ms * 1e-3, transfer_ms * 1e-3);
}
