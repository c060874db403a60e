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
//   auto interleaved = interleaved_one_f_one_b(/*devices=*/4, /*micro_batches=*/8, /*chunks=*/2);
//   // "device 0: F0c0 F1c0 F2c0 F3c0 F0c1 ...": programs per device, costs per virtual stage
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
// Note [Virtual stages]
// An interleaved program (Note [Interleaved 1F1B] in program.cc) gives each device v model
// chunks: chunk c of device d is virtual stage k = c p + d of a pipeline of p v stages, and
// data flows along virtual stages: forward (i, k) after forward (i, k - 1), backward (i, k)
// after backward (i, k + 1) and after forward (i, k) (the last virtual stage's backward after
// its own forward). A PipelineProgram is then one program per device whose actions name their
// chunk; everything below that is "per stage" (input buffers, quotas, costs) is per virtual
// stage, indexed by k; devices are the resources that run one action at a time (timeline
// rows, busy time, stashed activations). A program with no chunk (all 0) has v = 1, where
// virtual stages and devices are the same thing.
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
using PipelineProgram = std::vector<StageProgram>;  // one per stage (per device)

PipelineProgram inference_forward(int num_stages, int num_micro_batches);
PipelineProgram gpipe(int num_stages, int num_micro_batches);
PipelineProgram one_f_one_b(int num_stages, int num_micro_batches);
// Megatron's interleaved 1F1B (Note [Interleaved 1F1B] in program.cc): one program per device,
// each running `num_chunks` virtual stages. Needs num_micro_batches to be a multiple of
// num_devices when num_chunks > 1; one chunk is one_f_one_b.
PipelineProgram interleaved_one_f_one_b(int num_devices, int num_micro_batches, int num_chunks);
// Every stage runs, for t in [0, num_steps), for g in [0, num_groups): forward (g, t).
PipelineProgram decode_program(int num_stages, int num_groups, int num_steps);

// "F3", "B0"; "F3.2" (group 3, step 2) when the step is not 0 or `show_step`; "F3c1"
// (chunk 1) when the chunk is not 0 or `show_chunk`.
std::string to_string(const Action& action, bool show_step = false, bool show_chunk = false);
// One line per stage ("device d:" in an interleaved program); every action shows its step
// when any action has a step, and its chunk when any action has a chunk.
std::string to_string(const PipelineProgram& program);

// Chunks per device: 1 + the largest chunk any action names.
int num_chunks(const PipelineProgram& program);

// The most activations stage (device) s holds at once: forwards done whose backward has not
// run, counted in chunks (an interleaved device's chunk is 1/v of its layers).
std::vector<int> peak_stashed_activations(const PipelineProgram& program);
// The same in bytes, per device, when a micro-batch's stash on virtual stage k takes
// bytes_per_virtual_stage[k] (chunks of one device may differ). Forward-only programs hold
// one input at a time: their largest.
std::vector<double> peak_stashed_bytes(const PipelineProgram& program,
                                       const std::vector<double>& bytes_per_virtual_stage);

// Input slots each virtual stage needs: see Note [Input slots and credits]. Validates the
// program.
std::vector<int> buffer_quota(const PipelineProgram& program);

// Bubbles. With p stages of equal costs, m micro-batches, no transfer time, GPipe and 1F1B
// take (m + p - 1) (f + b) and idle (p - 1) (f + b) of it; interleaved 1F1B over v chunks
// idles (p - 1) (f + b) / v of (m v + p - 1) (f + b) / v.
//   ideal_bubble_fraction   the idle fraction of the step: (p - 1) / (v m + p - 1)
//                           ((p - 1) / (m + p - 1) for v = 1)
//   megatron_bubble_ratio   Megatron's figure, idle time over the ideal time m (f + b):
//                           (p - 1) / (v m)
double ideal_bubble_fraction(int num_stages, int num_micro_batches, int num_chunks = 1);
double megatron_bubble_ratio(int num_stages, int num_micro_batches, int num_chunks = 1);

// Per virtual stage (per stage when the program has no chunks).
struct StageCosts {
  std::vector<double> forward;   // seconds per micro-batch, per stage (decoding: the prefill)
  std::vector<double> backward;  // per stage (unused by forward-only programs)
  // Seconds to move one activation between adjacent stages (none between two chunks of one
  // device).
  double transfer = 0.0;
  // Decoding: seconds per stage of a step after the first (one new token per sequence);
  // empty: as `forward`.
  std::vector<double> decode;
  // Decoding: seconds from the last stage's output to the next token being ready for stage 0
  // (sampling), on top of `transfer` for the hop back (no hop when there is one stage).
  double sample = 0.0;
};

struct TimelineEvent {
  int stage;  // the device (program) that ran it; the action names its chunk
  Action action;
  double start, end;
};

struct Timeline {
  std::vector<TimelineEvent> events;  // in order of start time (then stage)
  double step_time = 0.0;
  std::vector<double> busy;         // per stage (device): seconds of compute
  std::vector<double> utilisation;  // busy / step_time
};

// The idle fraction of the step, over all devices: 1 - mean busy / step_time.
double measured_bubble_fraction(const Timeline& timeline);

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

// A text chart of the timeline: one row per stage (device), `width` columns for the whole step.
std::string render_timeline(const Timeline& timeline, int num_stages, int width = 80);

}  // namespace libai::schedule
