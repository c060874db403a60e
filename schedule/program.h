// Pipeline programs as data: for each stage, the ordered actions it runs. A stage consumes
// its inputs in program order (never by arrival), which is what makes a plan checkable
// before it runs: `simulate` replays every program symbolically and either returns the
// timeline or names the stages that would wait forever.
//
//   auto programs = one_f_one_b(/*stages=*/4, /*micro_batches=*/8);
//   print(programs);                          // "stage 0: F0 F1 F2 F3 B0 F4 B1 ..."
//   StageCosts costs{.forward = {2e-3, ...}, .backward = {4e-3, ...}, .transfer = 1e-4};
//   Timeline t = simulate(programs, costs);   // t.step_time, t.utilisation[s], t.events
//
// Note [Schedules from buffer quotas]: the warm-up of stage s in 1F1B is p - 1 - s forwards;
// that bounds the activations it keeps to p - s micro-batches. GPipe is all forwards, then
// all backwards (unbounded quota). Inference is forwards only.
#pragma once

#include <string>
#include <vector>

namespace libai::schedule {

enum class ActionKind { forward, backward };

struct Action {
  ActionKind kind;
  int micro_batch;
  bool operator==(const Action&) const = default;
};

using StageProgram = std::vector<Action>;
using PipelineProgram = std::vector<StageProgram>;  // one per stage

PipelineProgram inference_forward(int num_stages, int num_micro_batches);
PipelineProgram gpipe(int num_stages, int num_micro_batches);
PipelineProgram one_f_one_b(int num_stages, int num_micro_batches);

std::string to_string(const Action& action);  // "F3", "B0"
std::string to_string(const PipelineProgram& program);

// The most activations stage s holds at once (forwards done whose backward has not run).
std::vector<int> peak_stashed_activations(const PipelineProgram& program);

struct StageCosts {
  std::vector<double> forward;   // seconds per micro-batch, per stage
  std::vector<double> backward;  // per stage (unused by inference programs)
  double transfer = 0.0;         // seconds to move one activation between adjacent stages
};

struct TimelineEvent {
  int stage;
  Action action;
  double start, end;
};

struct Timeline {
  std::vector<TimelineEvent> events;  // in order of start time
  double step_time = 0.0;
  std::vector<double> busy;         // per stage: seconds of compute
  std::vector<double> utilisation;  // busy / step_time
};

// Discrete-event replay. Throws InvalidArgument naming the blocked stages and the actions
// they wait for when the programs deadlock, or when a program is malformed (an action
// repeated, a backward before its forward, a micro-batch missing on some stage).
Timeline simulate(const PipelineProgram& program, const StageCosts& costs);

// A text chart of the timeline: one row per stage, `width` columns for the whole step.
std::string render_timeline(const Timeline& timeline, int num_stages, int width = 80);

}  // namespace libai::schedule
