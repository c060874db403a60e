// Pipeline programs as data: for each stage, the ordered actions it runs. A stage consumes
// its inputs in program order (never by arrival), which is what makes a plan checkable
// before it runs: `simulate` replays every program symbolically and either returns the
// timeline or names the stages that would wait forever.
//
//   auto programs = one_f_one_b(/*stages=*/4, /*micro_batches=*/8);
//   print(programs);                          // "stage 0: F0 F1 F2 F3 B0 F4 B1 ..."
//   StageCosts costs{.forward = {2e-3, ...}, .backward = {4e-3, ...}, .transfer = 1e-4};
//   Timeline t = simulate(programs, costs);   // t.step_time, t.utilisation[s], t.events
//   std::vector<int> slots = buffer_quota(programs);         // {4, 4, 3, 2}
//   Timeline same = simulate(programs, costs, slots);        // credits never hold it back
//
//   auto decoding = decode_program(/*stages=*/4, /*groups=*/6, /*steps=*/32);
//   costs.decode = {1e-4, ...};               // one token per sequence; `forward` is the prefill
//
// Note [Schedules from buffer quotas]: the warm-up of stage s in 1F1B is p - 1 - s forwards;
// that bounds the activations it keeps to p - s micro-batches. GPipe is all forwards, then
// all backwards (unbounded quota). Inference is forwards only. Decoding is inference whose
// unit is a group of sequences run for several steps: stage s runs (step t, group g) t-major,
// and a group's step t + 1 on stage 0 needs its token from step t on the last stage.
//
// Note [Input slots and credits]
// Every stage has an input buffer of `quota[s]` slots. A producer (stage s - 1) fires a
// forward only when it holds a credit for a free slot of the consumer's buffer: the slot is
// taken when the producer starts and freed when the consumer is done with that input: at the
// end of its forward, or, when the stage also runs that micro-batch's backward, at the end of
// the backward (the stage input is what the backward recomputes from: it is the stash).
// Stage 0's inputs come from the driver, which writes them in stage 0's program order as soon
// as they exist (prompts at once, a decoding group's next token when the last stage has
// produced it) and a slot is free, at no cost. The last stage's outputs go to the driver (or,
// in training, to its own backward) and need no credit.
// `buffer_quota` gives each stage the slots it holds at its peak, plus one slot for the
// next input to arrive while it computes (double buffering; stage 0 needs none, the driver
// writes at once). For 1F1B that is p slots on stage 0 and p - s + 1 on stage s > 0: the
// p - s stashed inputs of the Note above plus the one arriving; for inference and decoding,
// 1 on stage 0 and 2 elsewhere. With these quotas a credit never delays a training program
// (the producer's own program order bounds what it sends ahead), and a forward-only program
// keeps its step time when transfers are free and every step costs the same. Otherwise (a
// transfer longer than the consumer's compute, a prefill that loads the stages unlike the
// decoding steps) a few more slots can save some time: simulate() with the quotas predicts
// it; one slot per group never binds a decoding program (a group has one input in flight).
// Fewer slots make stages wait (1 slot serialises neighbours) and, below what the program
// order needs, deadlock: `simulate` then names the stage whose buffer is full.
#pragma once

#include <limits>
#include <string>
#include <vector>

namespace libai::schedule {

enum class ActionKind { forward, backward };

struct Action {
  ActionKind kind;
  int micro_batch;  // or the group of sequences, in decoding programs
  int step = 0;     // decoding step (0: the prefill); 0 in training and one-shot inference
  // Interleaved schedules: which of the device's virtual stages (model chunks) the action
  // runs; 0 otherwise. Virtual stage c of device d is pipeline stage c * devices + d.
  int chunk = 0;
  bool operator==(const Action&) const = default;
};

using StageProgram = std::vector<Action>;
using PipelineProgram = std::vector<StageProgram>;  // one per stage

PipelineProgram inference_forward(int num_stages, int num_micro_batches);
PipelineProgram gpipe(int num_stages, int num_micro_batches);
PipelineProgram one_f_one_b(int num_stages, int num_micro_batches);
// Every stage runs, for t in [0, num_steps), for g in [0, num_groups): forward (g, t).
PipelineProgram decode_program(int num_stages, int num_groups, int num_steps);

// "F3", "B0"; "F3.2" (group 3, step 2) when the step is not 0 or `show_step`.
std::string to_string(const Action& action, bool show_step = false);
// One line per stage; every action shows its step when any action has a step.
std::string to_string(const PipelineProgram& program);

// The most activations stage s holds at once (forwards done whose backward has not run).
std::vector<int> peak_stashed_activations(const PipelineProgram& program);

// Input slots each stage needs: see Note [Input slots and credits]. Validates the program.
std::vector<int> buffer_quota(const PipelineProgram& program);

struct StageCosts {
  std::vector<double> forward;   // seconds per micro-batch, per stage (decoding: the prefill)
  std::vector<double> backward;  // per stage (unused by forward-only programs)
  double transfer = 0.0;         // seconds to move one activation between adjacent stages
  // Decoding: seconds per stage of a step after the first (one new token per sequence);
  // empty: as `forward`.
  std::vector<double> decode;
  // Decoding: seconds from the last stage's output to the next token being ready for stage 0
  // (sampling), on top of `transfer` for the hop back (no hop when there is one stage).
  double sample = 0.0;
};

struct TimelineEvent {
  int stage;
  Action action;
  double start, end;
};

struct Timeline {
  std::vector<TimelineEvent> events;  // in order of start time (then stage)
  double step_time = 0.0;
  std::vector<double> busy;         // per stage: seconds of compute
  std::vector<double> utilisation;  // busy / step_time
};

constexpr int kUnboundedQuota = std::numeric_limits<int>::max();

// Discrete-event replay. Throws InvalidArgument naming the blocked stages and what each
// waits for when the programs deadlock, or when a program is malformed (an action
// repeated, a backward before its forward, a micro-batch missing on some stage, a decoding
// step whose previous step no stage runs).
Timeline simulate(const PipelineProgram& program, const StageCosts& costs);
// The same with credit-based input buffers of `input_quota[s]` slots (Note [Input slots and
// credits]); a stage whose buffer is too small for the program makes it deadlock.
Timeline simulate(const PipelineProgram& program, const StageCosts& costs,
                  const std::vector<int>& input_quota);

// A text chart of the timeline: one row per stage, `width` columns for the whole step.
std::string render_timeline(const Timeline& timeline, int num_stages, int width = 80);

}  // namespace libai::schedule
