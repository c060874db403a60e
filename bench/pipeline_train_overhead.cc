// Pipeline TRAINING overhead of the training stage actors (actors/train_pipeline.h) over
// synthetic stages (actors/synthetic_train.h) against the ideal schedule of the same program.
//
//   build/bench/bench_pipeline_train_overhead [--steps 10] [--stages 4] [--micro-batches 32]
//       [--forward-ms 2] [--backward-ms 4] [--binary build/bin/libai-actor] [--chunks 2]
//
// Rows (each a median over --steps steps, after one untimed warm-up step):
//   one process     LocalTrainPipeline, 1F1B (and interleaved with --chunks v > 1)
//   processes       --binary: p processes of `libai-actor run` on loopback (one stage each,
//                   job._target_: synthetic_train), packets over UCX; step times from node
//                   0's JSON
// ideal: simulate()'s step time of the same program at the nominal costs and zero transfer
// (interleaved: m (f + b) (1 + (p - 1) / (v m)), simulate() has no chunks). bubble: stage 0's
// idle share of the measured step, 1 - busy / step, against (p - 1) / (m + p - 1)
// ((p - 1) / (v m) interleaved). Peak stash: the most micro-batches stage 0 held between a
// forward and its backward, from the actor trace, for 1F1B and GPipe.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "actors/synthetic_train.h"
#include "schedule/train_programs.h"
#include "bench/summary.h"
#include "runtime/error.h"

namespace libai::actors {
namespace {

struct Options {
  int steps = 10, stages = 4, micro_batches = 32, chunks = 1;
  double forward_ms = 2, backward_ms = 4;
  std::string binary;
};

struct Row {
  std::string name;
  double measured = 0, ideal = 0, bubble = 0, ideal_bubble = 0;
  bench::Summary steps;
};

void print(const Row& r) {
  std::printf("%-34s step %8.2f ms (%.2f-%.2f)  ideal %8.2f ms  measured/ideal %.3f  "
              "bubble %.3f (ideal %.3f)\n",
              r.name.c_str(), r.measured * 1e3, r.steps.min * 1e3, r.steps.max * 1e3, r.ideal * 1e3,
              r.measured / r.ideal, r.bubble, r.ideal_bubble);
}

double ideal_step(const Options& o, const TrainPrograms& programs) {
  const double f = o.forward_ms * 1e-3, b = o.backward_ms * 1e-3;
  if (programs.chunks > 1)
    return o.micro_batches * (f + b) * (1 + double(o.stages - 1) / (programs.chunks * o.micro_batches));
  schedule::StageCosts costs{.forward = std::vector<double>(size_t(o.stages), f),
                             .backward = std::vector<double>(size_t(o.stages), b),
                             .transfer = 0};
  return schedule::simulate(programs.programs, costs).step_time;
}

double ideal_bubble(const Options& o, int chunks) {
  return chunks > 1 ? double(o.stages - 1) / (chunks * o.micro_batches)
                    : double(o.stages - 1) / (o.micro_batches + o.stages - 1);
}

TrainComputeFactory synthetic(const Options& o, int chunks) {
  return [=](const SlotSpec& slot) {
    return std::make_shared<SyntheticTrainCompute>(SyntheticTrainCompute::Options{
        .forward_seconds = o.forward_ms * 1e-3 / chunks,
        .backward_seconds = o.backward_ms * 1e-3 / chunks,
        .device = slot.stage,
        .devices = o.stages,
        .chunks = chunks,
        .elements = 2,
        .fail_forward_at = {}});
  };
}

// One process: measured step times and stage 0's busy share; with `peak`, stage 0's peak
// stash from the trace of one step.
Row in_process(const Options& o, const std::string& schedule, int chunks, int* peak = nullptr) {
  caf::actor_system_config config;
  configure_actor_system(config);
  caf::actor_system system(config);
  const TrainPrograms programs = train_programs(schedule, o.stages, o.micro_batches, chunks);
  PipelineLayout layout = make_train_layout({.dp = 1, .pp = o.stages, .tp = 1});
  std::mutex mutex;
  int held = 0, most = 0;
  TraceFn trace = [&](const SlotSpec& slot, const std::string& event) {
    if (slot.stage != 0) return;
    std::lock_guard lock(mutex);
    if (event.rfind("computed F", 0) == 0) most = std::max(most, ++held);
    if (event.rfind("computed B", 0) == 0) --held;
  };
  LocalTrainPipeline pipeline(system, layout, programs, synthetic(o, chunks),
                              peak ? trace : TraceFn{});
  Row row;
  row.name = str_cat("one process, ", schedule, chunks > 1 ? str_cat(" v = ", chunks) : "");
  const int steps = peak ? 1 : o.steps;
  pipeline.client().run_step(0);  // warm-up
  std::vector<double> times;
  for (int k = 1; k <= steps; ++k) times.push_back(pipeline.client().run_step(k).seconds);
  auto reports = pipeline.finish();
  if (peak) *peak = most;
  row.steps = bench::summarize(times);
  row.measured = row.steps.median;
  row.ideal = ideal_step(o, programs);
  for (const auto& r : reports)
    if (r.name == "stage 0") {
      double total = 0;
      for (double t : times) total += t;
      // busy over warm-up + timed steps; the warm-up step's share is the same per step.
      row.bubble = 1 - r.busy_seconds / (steps + 1) / (total / steps);
    }
  row.ideal_bubble = ideal_bubble(o, chunks);
  return row;
}

// p processes of `libai-actor run` on loopback.
Row across_processes(const Options& o, const std::string& schedule, int chunks) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("libai_train_bench_", ::getpid());
  fs::create_directories(dir);
  const int port = 20000 + ::getpid() % 20000;
  const std::string config = (dir / "train.yaml").string();
  std::ofstream(config) << str_cat(
      "train:\n  dist: {pipeline_parallel_size: ", o.stages, "}\n",
      "  cluster: {nodes: ", o.stages, ", token: bench-token, devices_per_node: 1}\n",
      "job:\n  _target_: synthetic_train\n  forward_seconds: ", o.forward_ms * 1e-3 / chunks,
      "\n  backward_seconds: ", o.backward_ms * 1e-3 / chunks, "\n  micro_batches: ",
      o.micro_batches, "\n  schedule: ", schedule, "\n  chunks: ", chunks, "\n  steps: ",
      o.steps + 1, "\n");
  std::vector<pid_t> pids;
  std::fflush(stdout);  // the children must not print this process's buffered rows again
  for (int r = 0; r < o.stages; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string out = (dir / str_cat("node", r, ".out")).string();
      const std::string err = (dir / str_cat("node", r, ".err")).string();
      (void)!std::freopen(out.c_str(), "w", stdout);
      (void)!std::freopen(err.c_str(), "w", stderr);
      std::vector<std::string> args{o.binary, "run", config, "--node-rank", std::to_string(r),
                                    "--port", std::to_string(port), "--json"};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(o.binary.c_str(), argv.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  for (size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    LIBAI_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "node ", r, " failed; see ",
                (dir / str_cat("node", r, ".err")).string());
  }
  std::ifstream in(dir / "node0.out");
  const auto doc = nlohmann::json::parse(in);
  std::vector<double> times;
  for (const auto& s : doc["train"]["steps"])
    if (s["step"].get<int>() > 0) times.push_back(s["seconds"].get<double>());
  Row row;
  row.name = str_cat(o.stages, " processes, ", schedule, chunks > 1 ? str_cat(" v = ", chunks) : "");
  row.steps = bench::summarize(times);
  row.measured = row.steps.median;
  row.ideal = ideal_step(o, train_programs(schedule, o.stages, o.micro_batches, chunks));
  double total = 0;
  for (double t : times) total += t;
  for (const auto& st : doc["stages"])
    if (st["name"] == "stage 0")
      row.bubble = 1 - st["busy_seconds"].get<double>() / (o.steps + 1) / (total / o.steps);
  row.ideal_bubble = ideal_bubble(o, chunks);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return row;
}

}  // namespace
}  // namespace libai::actors

int main(int argc, char** argv) {
  using namespace libai::actors;
  Options o;
  CLI::App app{"pipeline training overhead of the training stage actors"};
  app.add_option("--steps", o.steps);
  app.add_option("--stages", o.stages);
  app.add_option("--micro-batches", o.micro_batches);
  app.add_option("--forward-ms", o.forward_ms);
  app.add_option("--backward-ms", o.backward_ms);
  app.add_option("--chunks", o.chunks, "also run interleaved 1F1B with this many chunks (> 1)");
  app.add_option("--binary", o.binary, "libai-actor: also run across processes");
  CLI11_PARSE(app, argc, argv);
  try {
    std::printf("p = %d, m = %d, forward %.1f ms, backward %.1f ms, %d steps\n", o.stages,
                o.micro_batches, o.forward_ms, o.backward_ms, o.steps);
    print(in_process(o, "1f1b", 1));
    if (o.chunks > 1) print(in_process(o, "interleaved", o.chunks));
    if (!o.binary.empty()) {
      print(across_processes(o, "1f1b", 1));
      if (o.chunks > 1) print(across_processes(o, "interleaved", o.chunks));
    }
    int peak_1f1b = 0, peak_gpipe = 0;
    in_process(o, "1f1b", 1, &peak_1f1b);
    in_process(o, "gpipe", 1, &peak_gpipe);
    std::printf("peak stashed micro-batches at stage 0: 1F1B %d, GPipe %d (p = %d, m = %d)\n",
                peak_1f1b, peak_gpipe, o.stages, o.micro_batches);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pipeline_train_overhead: %s\n", e.what());
    return 1;
  }
  return 0;
}
