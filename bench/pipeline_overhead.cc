// Runtime overhead of the actor pipeline in one process: LocalPipeline over synthetic stages
// of known cost (actors/synthetic.h), against the ideal schedule length of the same job.
//
//   build/bench/bench_pipeline_overhead [--reps 10] [--stages 2,4,8] [--work-ms 0.5,2,10]
//                                       [--wait sleep|spin] [--json FILE] [--caf key=value]
//
// Three parts, each row a median over --reps runs (after two untimed warm-up runs; the runs
// of all rows are interleaved round-robin so that the machine's drift hits every row):
//   forward  one step of m = 32 micro-batches (encoding), p = 2, 4, 8, t = 0.5, 2, 10 ms
//   decode   8 steps over G = p groups (and G = 2p at t = 2 ms): a group's step s + 1 enters
//            when its step s came out of the last stage, as a token does
//   latency  zero work, 1 group, many steps: the time per step is one round trip
//            driver -> stage 0 -> ... -> stage p-1 -> driver -> job thread -> driver
// A run is timed from the first submit to the last output (run_synthetic_job: it also sends
// each group's done packet, which costs a few microseconds of submit).
//
// Note [Ideal schedule length]
// Stage s takes t_s per action; N = steps x G actions per stage. Two lower bounds:
//   bottleneck  sum_k t_k + (N - 1) x t_s for every s (the slowest stage busy throughout)
//   loop        (G - 1) x t_0 + steps x sum_k t_k (the last group's steps run one after another)
// ideal = the larger. With equal stages t and G >= p it is (steps x G + p - 1) x t: forward
// (m + p - 1) x t; decode with G = p (8 x p + p - 1) x t, where each group's next step
// comes back to stage 0 just as stage 0 finishes the previous group: no slack, so any delay
// on the return path (last stage -> driver -> job -> driver -> stage 0) becomes idle time of
// stage 0. With G = 2p there is p x t of slack per step to hide it.
// `ideal` uses the nominal t; `ideal'` uses each stage's measured time per action
// (StageReport busy_seconds / actions that did work): sleep_until oversleeps (80-140 us per
// action on a shared 2-core VM), and ideal' takes that out, leaving the runtime's own overhead.
// `stage 0 gap` is the median idle time of stage 0's thread between two actions: the
// per-action cost of the runtime when the next input is already there.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/pipeline.h"
#include "actors/synthetic.h"
#include "runtime/error.h"
#include "runtime/progress.h"
#include "bench/summary.h"

namespace libai::actors {
namespace {

using Clock = std::chrono::steady_clock;

struct Job {
  std::string kind;  // forward | decode | latency
  int stages = 4, groups = 32, steps = 1;
  double seconds = 0.002;  // nominal work per action
};

struct Run {
  double measured = 0;                 // first submit to last output
  std::vector<double> action_seconds;  // per stage: measured time per working action
  double stage0_gap = 0;               // median idle time of stage 0 between two actions
};

// SyntheticCompute that also notes when each action starts and ends on its stage's thread,
// for the idle gaps between actions (the runtime's per-action handoff, or a wait for input).
class TimedCompute : public StageCompute {
 public:
  TimedCompute(double seconds, SyntheticCompute::Wait wait) : inner_(seconds, wait) {}
  models::TensorMap forward(int group, const models::TensorMap& inputs) override {
    const auto start = Clock::now();
    auto out = inner_.forward(group, inputs);
    spans_.push_back({start, Clock::now()});
    return out;
  }
  void release(int group) override { inner_.release(group); }
  // Median of the idle times between consecutive actions (read after the job).
  double median_gap() const {
    std::vector<double> gaps;
    for (size_t i = 1; i < spans_.size(); ++i)
      gaps.push_back(std::chrono::duration<double>(spans_[i].first - spans_[i - 1].second).count());
    if (gaps.empty()) return 0;
    std::nth_element(gaps.begin(), gaps.begin() + std::ptrdiff_t(gaps.size() / 2), gaps.end());
    return gaps[gaps.size() / 2];
  }

 private:
  SyntheticCompute inner_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> spans_;
};

struct Options {
  int reps = 10;
  std::string wait = "sleep";
  std::string json;
  std::vector<int> stages{2, 4, 8};
  std::vector<double> work_ms{0.5, 2, 10};
  int latency_steps = 1000;
  std::vector<std::string> caf_options;  // "key=value": experiments with CAF's scheduler
};

double ideal_length(const Job& job, const std::vector<double>& t) {
  double sum = 0, slowest = 0;
  for (double x : t) sum += x, slowest = std::max(slowest, x);
  const double actions = double(job.steps) * job.groups;
  const double bottleneck = sum + (actions - 1) * slowest;
  const double loop = (job.groups - 1) * t[0] + job.steps * sum;
  return std::max(bottleneck, loop);
}

double nominal_ideal(const Job& job) {
  return ideal_length(job, std::vector<double>(size_t(job.stages), job.seconds));
}

int stage_of(const std::string& name) {  // "stage 3"
  return std::stoi(name.substr(name.rfind(' ') + 1));
}

Run run_once(caf::actor_system& system, const Job& job, SyntheticCompute::Wait wait) {
  PipelineLayout layout = make_layout({.dp = 1, .pp = job.stages, .tp = 1}, job.groups);
  std::vector<std::shared_ptr<TimedCompute>> computes(size_t(job.stages));
  LocalPipeline pipeline(system, layout, [&](const SlotSpec& slot) {
    computes[size_t(slot.stage)] = std::make_shared<TimedCompute>(job.seconds, wait);
    return computes[size_t(slot.stage)];
  });
  // The routes reach the actors asynchronously: let them settle before the clock starts.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto start = Clock::now();
  run_synthetic_job(pipeline.client(), layout, job.steps);
  Run run;
  run.measured = std::chrono::duration<double>(Clock::now() - start).count();
  auto reports = pipeline.wait(std::chrono::seconds(60));
  run.action_seconds.assign(size_t(job.stages), 0);
  for (const auto& r : reports) {
    // Every stage also ran one done packet per group, which does no work.
    const double working = double(r.actions) - job.groups;
    run.action_seconds[size_t(stage_of(r.name))] = r.busy_seconds / std::max(1.0, working);
  }
  run.stage0_gap = computes[0]->median_gap();
  return run;
}

using bench::Summary;
using bench::summarize;

std::vector<Job> make_jobs(const Options& o) {
  std::vector<Job> jobs;
  for (double ms : o.work_ms)
    for (int p : o.stages) jobs.push_back({"forward", p, 32, 1, ms * 1e-3});
  for (double ms : o.work_ms)
    for (int p : o.stages) jobs.push_back({"decode", p, p, 8, ms * 1e-3});
  for (int p : o.stages) jobs.push_back({"decode", p, 2 * p, 8, 0.002});
  if (o.latency_steps > 0)
    for (int p : o.stages) jobs.push_back({"latency", p, 1, o.latency_steps, 0.0});
  return jobs;
}

void print_tables(const std::vector<Job>& jobs, const std::vector<std::vector<Run>>& runs,
                  std::FILE* json) {
  std::printf(
      "\n| job | p | groups | steps | t ms | ideal ms | measured ms | measured / ideal "
      "| t' ms | ideal' ms | measured / ideal' | stage 0 gap us |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    if (job.kind == "latency") continue;
    std::vector<double> measured, ratio, ratio_measured, t_measured, ideal_measured, gap;
    const double ideal = nominal_ideal(job);
    for (const Run& r : runs[j]) {
      const double ideal2 = ideal_length(job, r.action_seconds);
      measured.push_back(r.measured);
      ratio.push_back(r.measured / ideal);
      ratio_measured.push_back(r.measured / ideal2);
      ideal_measured.push_back(ideal2);
      double mean = 0;
      for (double x : r.action_seconds) mean += x / double(r.action_seconds.size());
      t_measured.push_back(mean);
      gap.push_back(r.stage0_gap * 1e6);
    }
    const Summary m = summarize(measured), q = summarize(ratio), q2 = summarize(ratio_measured);
    const Summary t2 = summarize(t_measured), i2 = summarize(ideal_measured), g = summarize(gap);
    std::printf(
        "| %s | %d | %d | %d | %.1f | %.1f | %.2f | %.3f (%.3f-%.3f) | %.3f | %.2f | %.3f "
        "(%.3f-%.3f) | %.0f |\n",
        job.kind.c_str(), job.stages, job.groups, job.steps, job.seconds * 1e3, ideal * 1e3,
        m.median * 1e3, q.median, q.min, q.max, t2.median * 1e3, i2.median * 1e3, q2.median, q2.min,
        q2.max, g.median);
    if (json)
      std::fprintf(json,
                   "{\"bench\": \"pipeline_overhead\", \"job\": \"%s\", \"stages\": %d, "
                   "\"groups\": %d, \"steps\": %d, \"t_ms\": %.3f, \"runs\": %zu, "
                   "\"ideal_ms\": %.3f, \"measured_ms\": %.3f, \"ratio\": %.4f, "
                   "\"ratio_min\": %.4f, \"ratio_max\": %.4f, \"t_measured_ms\": %.4f, "
                   "\"ideal_measured_ms\": %.3f, \"ratio_measured\": %.4f, "
                   "\"ratio_measured_min\": %.4f, \"ratio_measured_max\": %.4f, "
                   "\"stage0_gap_us\": %.1f}\n",
                   job.kind.c_str(), job.stages, job.groups, job.steps, job.seconds * 1e3,
                   runs[j].size(), ideal * 1e3, m.median * 1e3, q.median, q.min, q.max,
                   t2.median * 1e3, i2.median * 1e3, q2.median, q2.min, q2.max, g.median);
  }
  // Latency: one group, zero work, so a step is one trip round the loop of p + 1 hops.
  std::printf(
      "\n| p | steps | us per step | hops (driver -> stages -> driver) | us per hop |\n"
      "|---:|---:|---:|---:|---:|\n");
  std::vector<std::pair<int, double>> per_step;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    if (job.kind != "latency") continue;
    std::vector<double> step_us;
    for (const Run& r : runs[j]) step_us.push_back(r.measured / job.steps * 1e6);
    const Summary s = summarize(step_us);
    const int hops = job.stages + 1;
    per_step.push_back({job.stages, s.median});
    std::printf("| %d | %d | %.1f (%.1f-%.1f) | %d | %.1f (%.1f-%.1f) |\n", job.stages, job.steps,
                s.median, s.min, s.max, hops, s.median / hops, s.min / hops, s.max / hops);
    if (json)
      std::fprintf(json,
                   "{\"bench\": \"pipeline_overhead\", \"job\": \"latency\", \"stages\": %d, "
                   "\"steps\": %d, \"runs\": %zu, \"us_per_step\": %.2f, \"us_per_step_min\": "
                   "%.2f, \"us_per_step_max\": %.2f, \"us_per_hop\": %.2f}\n",
                   job.stages, job.steps, runs[j].size(), s.median, s.min, s.max, s.median / hops);
  }
  if (per_step.size() >= 2) {
    // Least squares of us per step = fixed + per_stage x p: the stage hop against the part
    // that does not grow with p (the driver, the job thread's wake-up and its submit).
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (auto [p, us] : per_step) n += 1, sx += p, sy += us, sxx += double(p) * p, sxy += p * us;
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    const double fixed = (sy - slope * sx) / n;
    std::printf(
        "\nfit: us per step = %.1f + %.1f x p  (per stage hop %.1f us; driver + job "
        "thread round trip %.1f us)\n",
        fixed, slope, slope, fixed);
  }
}

int run(const Options& o) {
  caf::actor_system_config config;
  configure_actor_system(config);
  for (const std::string& option : o.caf_options) {
    const size_t eq = option.find('=');
    LIBAI_CHECK(eq != std::string::npos, "--caf ", option, ": expected key=value");
    const std::string key = option.substr(0, eq), value = option.substr(eq + 1);
    if (value.size() > 2 && value.substr(value.size() - 2) == "us")
      config.set(key, caf::timespan(std::chrono::microseconds(std::stoll(value))));
    else
      config.set(key, std::stoll(value));
    std::printf("CAF option %s = %s\n", key.c_str(), value.c_str());
  }
  caf::actor_system system(config);
  const auto wait = o.wait == "spin" ? SyntheticCompute::Wait::spin : SyntheticCompute::Wait::sleep;
  const std::vector<Job> jobs = make_jobs(o);
  std::printf(
      "actor pipeline overhead in one process: synthetic stages (%s), %d runs per row, "
      "%u hardware threads\n",
      o.wait.c_str(), o.reps, std::thread::hardware_concurrency());
  std::fflush(stdout);

  // Progress in milliseconds of ideal schedule, so that the ETA weighs long rows properly.
  auto weight = [](const Job& job) {
    return job.kind == "latency" ? std::max<int64_t>(1, job.steps * (job.stages + 1) / 20)
                                 : int64_t(nominal_ideal(job) * 1e3) + 10;
  };
  int64_t total = 0;
  for (const Job& job : jobs) total += weight(job) * o.reps;
  // Warm-up: the first jobs of a process start CAF's workers and fill the allocator's pool.
  for (int i = 0; i < 2; ++i) run_once(system, {"forward", 4, 32, 1, 0.0005}, wait);
  Progress progress("pipeline_overhead", total, "ms", 2.0);
  std::vector<std::vector<Run>> runs(jobs.size());
  for (int rep = 0; rep < o.reps; ++rep)
    for (size_t j = 0; j < jobs.size(); ++j) {
      runs[j].push_back(run_once(system, jobs[j], wait));
      char detail[96];
      std::snprintf(detail, sizeof detail, "rep %d/%d: %s p %d t %.1f ms: %.1f ms", rep + 1, o.reps,
                    jobs[j].kind.c_str(), jobs[j].stages, jobs[j].seconds * 1e3,
                    runs[j].back().measured * 1e3);
      progress.advance(weight(jobs[j]), detail);
    }

  std::FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "w");
  if (!o.json.empty() && !json) {
    std::fprintf(stderr, "cannot write %s\n", o.json.c_str());
    return 1;
  }
  print_tables(jobs, runs, json);
  if (json) std::fclose(json);
  return 0;
}

}  // namespace
}  // namespace libai::actors

int main(int argc, char** argv) {
  libai::actors::Options o;
  CLI::App app{"Overhead of the actor pipeline against the ideal schedule (synthetic stages)"};
  app.add_option("--reps", o.reps, "timed runs per row")->check(CLI::PositiveNumber);
  app.add_option("--wait", o.wait, "how a synthetic stage waits: sleep | spin")
      ->check(CLI::IsMember({"sleep", "spin"}));
  app.add_option("--json", o.json, "also write one JSON line per row to this file");
  app.add_option("--stages", o.stages, "pipeline depths p (comma-separated)")->delimiter(',');
  app.add_option("--work-ms", o.work_ms, "work per action t in ms (comma-separated)")
      ->delimiter(',');
  app.add_option("--latency-steps", o.latency_steps,
                 "steps of the zero-work latency rows (0: none)");
  app.add_option("--caf", o.caf_options,
                 "a CAF setting for the experiment, e.g. work-stealing.moderate-poll-attempts=0 "
                 "or work-stealing.moderate-sleep-duration=10us (repeatable)");
  app.allow_extras();  // tools/run_benchmarks.sh passes Google Benchmark's flags to every bench
  CLI11_PARSE(app, argc, argv);
  try {
    return libai::actors::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pipeline_overhead: %s\n", e.what());
    return 1;
  }
}
