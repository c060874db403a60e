// The training stage actor: one (replica, device, tp rank) slot of a training pipeline, pinned
// to its device. Told to run step k, it runs its device's program (schedule::StageProgram) in
// program order: F(mb, chunk) fires when its activation packet has arrived (none on the first
// virtual stage, which reads its own data) and, unless it is the last virtual stage, it holds
// a credit for a free input slot of its consumer; B(mb, chunk) fires when the gradient packet
// from downstream has arrived (none on the last virtual stage, which starts from its loss).
// Forward outputs go downstream as activations, backward outputs upstream as gradients. After
// its last action it runs compute->end_step(k) and reports (step_done_atom, slot, k, summary).
//
//   TrainStageSetup setup{.name = "stage 1", .slot = 1, .compute = my_chunks, .program = p[1],
//   ...}; caf::actor stage = spawn_train_stage(system, setup); caf::anon_send(stage,
//   routes_atom::value, TrainRoutesPtr(...));  // per chunk: its neighbours caf::anon_send(stage,
//   step_atom::value, 0);   // ... (step_done_atom, 1, 0, summary) to the driver
//   caf::anon_send(stage, stop_atom::value);      // (finished_atom, StageReport) to the parent
//
// Note [Training packets]
// A packet says which way it flows (`gradient`), the micro-batch (`group`), the training step
// and the model chunk of the stage that consumes it. Interleaved programs hold several chunks
// per device: chunk c of device d sends forward to chunk c of device d + 1, the last device's
// chunk c to device 0's chunk c + 1; gradients go the reverse way. Every (receiving slot,
// chunk, direction) is a link of its own, with its own channel: between two nodes an
// activation and a gradient travel on different message-plane channels, each to its actor.
//
// Note [Training credits]
// An activation takes an input slot of its consumer, and the slot holds that micro-batch's
// stash until the consumer's BACKWARD of it ends (Note [Input slots and credits] in
// schedule/program.h): the credit goes back upstream then, not after the forward. So a
// producer may run ahead of its consumer by the consumer's quota, and the stash of every
// stage is bounded by it (train_input_quota: the program's own peak, one slot for the next
// arrival and one for the action queued on the pinned thread).
// Gradient packets take no credit. A gradient for B(mb, c) is sent by the downstream stage only
// after its own B(mb, c'), which needs this stage's F(mb, c) output; and this stage consumes
// its gradients in its program's order. What can wait here is therefore at most the
// micro-batches this stage has forwarded and not yet run backward for: its stash, which the
// credits above already bound. A credit for gradients would bound nothing more and would add a
// round trip to every backward.
//
// Note [Train controls]
// Checkpoints and evaluation run between steps, on every stage at once: the driver sends
// (control_atom, TrainControl bytes) to every stage, each runs compute->control on its pinned
// thread (which may run collectives with the other stages: gathering a checkpoint to world
// rank 0, forwarding validation micro-batches through the stages) and answers
// (control_done_atom, slot, StepSummary bytes). The driver starts a control only when no step
// runs and the next step only when every stage answered, so a stage's thread never sees a
// control and an action at once; a step asked for meanwhile is an error.
//
// Errors: an exception on the pinned thread (forward, backward, end_step, the message plane)
// reaches the parent as (failed_atom, "<stage name>: <what>") and the stage stops.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/stage_actor.h"
#include "actors/train_stage.h"
#include "schedule/program.h"

namespace libai::actors {

using step_atom = caf::atom_constant<caf::atom("step")>;           // run training step k
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;  // a stage ran its step
using control_atom = caf::atom_constant<caf::atom("control")>;     // a TrainControl between steps
using control_done_atom = caf::atom_constant<caf::atom("ctrldone")>;  // a stage ran its control

// One model chunk's neighbours.
struct TrainLink {
  Route upstream;            // activations come from there; gradients and credits go there
  int upstream_chunk = 0;    // the chunk there (gradients carry it)
  std::uint32_t input_channel = 0;  // the link of the activations into this chunk: credits name it
  Route downstream;          // activations go there; gradients come from there
  int downstream_chunk = 0;  // the chunk there
  int downstream_slots = 1;  // the consumer's input quota: the credits we start with
};

struct TrainRoutes {
  std::vector<TrainLink> chunks;  // per model chunk of this stage
  caf::actor driver;              // step reports go there
};
using TrainRoutesPtr = std::shared_ptr<const TrainRoutes>;

struct TrainStageSetup {
  std::string name;                 // "stage 1 (dp 0, tp 1)"
  int slot = 0;                     // the layout's slot index: step reports carry it
  int node = 0;                     // this process's node rank
  Device device = Device::cpu();
  double slowdown = 1.0;            // emulated slower device (see StageSetup)
  std::shared_ptr<TrainStageCompute> compute;
  schedule::StageProgram program;   // one step's actions, in order
  // Packets and credits to other nodes (actors/packet_inbox.h); null in one process.
  std::shared_ptr<comm::MessagePlane> plane;
  caf::actor parent;                // (finished_atom, StageReport bytes) or (failed_atom, text)
  std::shared_ptr<StageProgress> progress;  // for the cluster's watchdog (null: none)
  // Tests: each event as it happens on the actor, one at a time: "arrive F3 s0" (the input of
  // F3 of step 0), "arrive B3 s0" (its gradient), "fire F3 s0", "computed F3 s0", "free F3 s0"
  // (the input slot's credit went back), "credit c0", "step s0", "step_done s0". Chunks other
  // than 0 show as "F3c1".
  std::function<void(const std::string&)> trace;
};

caf::actor spawn_train_stage(caf::actor_system& system, TrainStageSetup setup);

// The input quota of model chunk `chunk` of a stage running `program` (Note [Training credits]).
int train_input_quota(const schedule::StageProgram& program, int chunk);

// "F3", "B0c1": an action as traces name it.
std::string train_action_name(const schedule::Action& action);

}  // namespace libai::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(libai::actors::TrainRoutesPtr)
