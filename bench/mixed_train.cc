// Mixed hardware pipeline TRAINING: the planner's balanced split (train.dist.balance: measured)
// against the uniform split and against the simulator's optimum, on devices of emulated speed
// (slow-down factors: a device of slow-down k takes k times as long for the same layers).
//
//   build/bench/bench_mixed_train [--reps 3] [--steps 5] [--micro-batches 16] [--layers 24]
//       [--layer-ms 0.5] [--backward-factor 2] [--binary build/bin/libai-actor]
//
// Cases: slow-downs 2:1 (p = 2: the slow device first) and 1:2:4 (p = 3), 1F1B, m micro-
// batches, L synthetic layers of --layer-ms forward each (backward --backward-factor x that).
// Rows (each variant's median step over --steps steps after one warm-up step; variants
// alternate within a repetition, the order rotating each repetition):
//   one process   LocalTrainPipeline; the split is compile_plan's from each device's layer as
//                 time_synthetic_layer measures it at the device's slow-down (what a node does
//                 when it joins), balanced (over device orders) or uniform
//   processes     --binary: p processes of `libai-actor run` (synthetic_train, balance
//                 measured or uniform) on loopback, packets over UCX; steps from node 0's JSON
// optimum: the best simulate()d step time (1F1B, zero transfer, unbounded buffers) over every
// contiguous split of the L layers and every order of the devices along the pipeline, with the
// true costs (layers x layer-ms x slow-down). Figures:
//   balanced / optimum   optimum step / measured balanced step: the throughput the balanced
//                        split reaches as a share of the best any split could (goal >= 0.95)
//   split quality        optimum / simulated step of the split the planner chose (1: optimal)
//   balanced vs uniform  measured uniform step / measured balanced step (the speed-up)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "actors/synthetic.h"
#include "actors/synthetic_train.h"
#include "plan/timed_layers.h"
#include "schedule/train_programs.h"
#include "bench/summary.h"
#include "runtime/error.h"
#include "schedule/plan.h"

namespace libai::actors {
namespace {

struct Options {
  int reps = 3, steps = 5, micro_batches = 16, layers = 24;
  double layer_ms = 0.5, backward_factor = 2;
  std::string binary;
};

struct Case {
  std::string name;
  std::vector<double> slowdown;  // per device
};

// A split: layers per stage and the device running each stage.
struct Split {
  std::vector<int> counts, device_of_stage;
  std::string label() const {
    std::string out;
    for (size_t s = 0; s < counts.size(); ++s) out += (s ? "/" : "") + std::to_string(counts[s]);
    bool identity = true;
    for (size_t s = 0; s < device_of_stage.size(); ++s) identity = identity && device_of_stage[s] == int(s);
    if (!identity) {
      out += " on ";
      for (size_t s = 0; s < device_of_stage.size(); ++s)
        out += (s ? "," : "") + std::to_string(device_of_stage[s]);
    }
    return out;
  }
};

// The simulated 1F1B step of `split` under the true costs.
double simulated_step(const Options& o, const Case& c, const Split& split) {
  const int p = int(c.slowdown.size());
  schedule::StageCosts costs;
  for (int s = 0; s < p; ++s) {
    const double f = split.counts[size_t(s)] * o.layer_ms * 1e-3 *
                     c.slowdown[size_t(split.device_of_stage[size_t(s)])];
    costs.forward.push_back(f);
    costs.backward.push_back(o.backward_factor * f);
  }
  return schedule::simulate(schedule::one_f_one_b(p, o.micro_batches), costs).step_time;
}

// Brute force over every order of the devices and every contiguous split.
std::pair<double, Split> optimum(const Options& o, const Case& c) {
  const int p = int(c.slowdown.size());
  std::vector<int> order(static_cast<size_t>(p));
  std::iota(order.begin(), order.end(), 0);
  double best = 1e300;
  Split best_split;
  do {
    // Every composition of `layers` into p positive parts: cuts 0 < c1 < ... < c_{p-1} < L.
    std::vector<int> cuts(static_cast<size_t>(p - 1));
    std::iota(cuts.begin(), cuts.end(), 1);
    while (true) {
      Split split{{}, order};
      int previous = 0;
      for (int cut : cuts) split.counts.push_back(cut - std::exchange(previous, cut));
      split.counts.push_back(o.layers - previous);
      const double t = simulated_step(o, c, split);
      if (t < best - 1e-12) best = t, best_split = split;
      // The next combination of cuts.
      int k = p - 2;
      while (k >= 0 && cuts[size_t(k)] == o.layers - (p - 1 - k)) --k;
      if (k < 0) break;
      ++cuts[size_t(k)];
      for (int j = k + 1; j < p - 1; ++j) cuts[size_t(j)] = cuts[size_t(j - 1)] + 1;
    }
  } while (std::next_permutation(order.begin(), order.end()));
  return {best, best_split};
}

Split split_of(const std::vector<int64_t>& stage_of, const std::vector<int64_t>& device_of_stage, int p) {
  Split split;
  split.counts.assign(size_t(p), 0);
  for (int64_t s : stage_of) ++split.counts[size_t(s)];
  for (int s = 0; s < p; ++s)
    split.device_of_stage.push_back(device_of_stage.empty() ? s : int(device_of_stage[size_t(s)]));
  return split;
}

struct Run {
  double step = 0, predicted = 0;  // measured median step; the plan's prediction (processes)
  Split split;
};

double median(std::vector<double> v) { return bench::summarize(std::move(v)).median; }

// One process: the plan as a node would compile it, from layers timed at each slow-down.
Run in_process(const Options& o, const Case& c, bool balanced) {
  const int p = int(c.slowdown.size());
  schedule::PlanRequest request;
  request.pp = p;
  for (double k : c.slowdown)
    request.layer_time.emplace_back(size_t(o.layers), libai::plan::time_synthetic_layer(o.layer_ms * 1e-3, k));
  request.weight_bytes.assign(size_t(o.layers), 0.0);
  request.workload = schedule::Workload::train;
  request.schedule = schedule::PipelineSchedule::one_f_one_b;
  request.num_micro_batches = o.micro_batches;
  request.backward_factor = o.backward_factor;
  request.balance = balanced ? schedule::Balance::balanced : schedule::Balance::uniform;
  const schedule::Plan plan = schedule::compile_plan(request);
  Run run;
  for (const auto& st : plan.stages) run.split.device_of_stage.push_back(st.slot);
  run.split.counts.assign(size_t(p), 0);
  for (int s : plan.stage_of) ++run.split.counts[size_t(s)];
  run.predicted = plan.timeline.step_time;

  caf::actor_system_config config;
  configure_actor_system(config);
  caf::actor_system system(config);
  PipelineLayout layout = make_train_layout({.dp = 1, .pp = p, .tp = 1});
  for (SlotSpec& slot : layout.slots)
    slot.slowdown = c.slowdown[size_t(run.split.device_of_stage[size_t(slot.stage)])];
  const auto counts = run.split.counts;
  TrainComputeFactory make = [&](const SlotSpec& slot) {
    const double f = counts[size_t(slot.stage)] * o.layer_ms * 1e-3;
    return std::make_shared<SyntheticTrainCompute>(SyntheticTrainCompute::Options{
        .forward_seconds = f,
        .backward_seconds = o.backward_factor * f,
        .chunk_forward_seconds = {},
        .chunk_backward_seconds = {},
        .device = slot.stage,
        .devices = p,
        .chunks = 1,
        .elements = 2,
        .fail_forward_at = {}});
  };
  LocalTrainPipeline pipeline(system, layout, train_programs("1f1b", p, o.micro_batches), make);
  pipeline.client().run_step(0);  // warm-up
  std::vector<double> times;
  for (int k = 1; k <= o.steps; ++k) times.push_back(pipeline.client().run_step(k).seconds);
  pipeline.finish();
  run.step = median(times);
  return run;
}

// p processes of `libai-actor run` on loopback.
Run across_processes(const Options& o, const Case& c, bool balanced) {
  namespace fs = std::filesystem;
  const int p = int(c.slowdown.size());
  const fs::path dir = fs::temp_directory_path() / str_cat("libai_mixed_train_", ::getpid());
  fs::create_directories(dir);
  static int round = 0;
  const int port = 20000 + (::getpid() * 7 + 97 * round++) % 20000;
  std::string slowdown;
  for (double k : c.slowdown) slowdown += (slowdown.empty() ? "" : ", ") + str_cat(k);
  const std::string config = (dir / "train.yaml").string();
  std::ofstream(config) << str_cat(
      "train:\n  dist: {pipeline_parallel_size: ", p, ", pipeline_num_layers: ", o.layers,
      ", balance: ", balanced ? "measured" : "uniform", "}\n",
      "  cluster: {nodes: ", p, ", token: bench-token, devices_per_node: 1, device_slowdown: [",
      slowdown, "]}\n", "job:\n  _target_: synthetic_train\n  layer_seconds: ", o.layer_ms * 1e-3,
      "\n  backward_factor: ", o.backward_factor, "\n  micro_batches: ", o.micro_batches,
      "\n  schedule: 1f1b\n  steps: ", o.steps + 1, "\n");
  std::vector<pid_t> pids;
  std::fflush(stdout);  // the children must not print this process's buffered rows again
  for (int r = 0; r < p; ++r) {
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
  Run run;
  run.step = doc["train"]["measured_step_seconds"].get<double>();
  run.predicted = doc["plan"]["predicted_step_seconds"].get<double>();
  run.split = split_of(doc["plan"]["stage_of"].get<std::vector<int64_t>>(),
                       doc["plan"]["device_of_stage"].get<std::vector<int64_t>>(), p);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return run;
}

std::string range(const bench::Summary& s, const char* format) {
  char text[96];
  const std::string f = str_cat(format, " (", format, "-", format, ")");
  std::snprintf(text, sizeof text, f.c_str(), s.median, s.min, s.max);
  return text;
}

void bench_case(const Options& o, const Case& c, bool processes) {
  const auto [best, best_split] = optimum(o, c);
  std::vector<Run> balanced, uniform;
  for (int rep = 0; rep < o.reps; ++rep)
    for (int k = 0; k < 2; ++k) {
      const bool b = (k + rep) % 2 == 0;
      (b ? balanced : uniform)
          .push_back(processes ? across_processes(o, c, b) : in_process(o, c, b));
    }
  std::vector<double> to_optimum, vs_uniform, quality, prediction, balanced_steps, uniform_steps;
  std::map<std::string, int> splits;
  for (int rep = 0; rep < o.reps; ++rep) {
    const Run& b = balanced[size_t(rep)];
    const Run& u = uniform[size_t(rep)];
    balanced_steps.push_back(b.step * 1e3);
    uniform_steps.push_back(u.step * 1e3);
    to_optimum.push_back(best / b.step);
    vs_uniform.push_back(u.step / b.step);
    quality.push_back(best / simulated_step(o, c, b.split));
    prediction.push_back(b.predicted / b.step);
    ++splits[b.split.label()];
  }
  std::string chosen;
  for (const auto& [label, n] : splits) chosen += (chosen.empty() ? "" : ", ") + label + (o.reps > 1 ? str_cat(" x", n) : "");
  std::printf("| %s | %s | %s | %.1f | %s | %s | %s | %s | **%s** | **%s** | %s | %s |\n",
              processes ? str_cat(c.slowdown.size(), " processes").c_str() : "one process",
              c.name.c_str(), best_split.label().c_str(), best * 1e3, chosen.c_str(),
              range(bench::summarize(balanced_steps), "%.1f").c_str(),
              uniform[0].split.label().c_str(),
              range(bench::summarize(uniform_steps), "%.1f").c_str(),
              range(bench::summarize(to_optimum), "%.3f").c_str(),
              range(bench::summarize(vs_uniform), "%.2f").c_str(),
              range(bench::summarize(quality), "%.3f").c_str(),
              range(bench::summarize(prediction), "%.3f").c_str());
  std::fflush(stdout);
}

}  // namespace
}  // namespace libai::actors

int main(int argc, char** argv) {
  using namespace libai::actors;
  Options o;
  CLI::App app{"mixed hardware pipeline training: balanced against uniform and the optimum"};
  app.add_option("--reps", o.reps);
  app.add_option("--steps", o.steps);
  app.add_option("--micro-batches", o.micro_batches);
  app.add_option("--layers", o.layers);
  app.add_option("--layer-ms", o.layer_ms);
  app.add_option("--backward-factor", o.backward_factor);
  app.add_option("--binary", o.binary, "libai-actor: also run across processes");
  CLI11_PARSE(app, argc, argv);
  try {
    std::printf("1F1B, m = %d, %d layers of %.3g ms forward, backward %gx, %d steps after a "
                "warm-up, %d repetitions\n\n",
                o.micro_batches, o.layers, o.layer_ms, o.backward_factor, o.steps, o.reps);
    std::printf("| where | slow-downs | optimum split | optimum step ms (sim) | balanced split | "
                "balanced step ms | uniform split | uniform step ms | balanced / optimum | "
                "balanced vs uniform | split quality (sim) | predicted / measured |\n"
                "|---|---|---|---:|---|---:|---|---:|---:|---:|---:|---:|\n");
    const std::vector<Case> cases{{"2:1", {2, 1}}, {"1:2:4", {1, 2, 4}}};
    for (const Case& c : cases) bench_case(o, c, false);
    if (!o.binary.empty())
      for (const Case& c : cases) bench_case(o, c, true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mixed_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
