// The stage actor: one pipeline stage (one (dp, pp, tp) slot) pinned to its device. It runs
// its program (Note [Stage programs]) one action at a time on its own thread, firing an action
// when that action's input has arrived and the consumer has a free input slot (a credit), and
// it returns a credit to its producer as soon as an input slot is free again: credit-based
// back-pressure, so the quotas that schedule/ validated bound every buffer.
//
//   StageSetup setup{.name = "stage 1", .compute = my_layers, .groups = {0, 1, 2, 3}, ...};
//   caf::actor stage = spawn_stage(system, setup);
//   caf::anon_send(stage, routes_atom::value, StageRoutesPtr(...));   // producer and consumer
//   // ... packets arrive as (packet_atom, PacketPtr): from this process, or from another
//   // through this node's packet inbox (actors/packet_inbox.h), complete with their bytes.
//
// Note [Stage programs]
// A stage consumes its inputs in a fixed order, never by arrival: step-major over the groups
// still active, (step 0, group 0), (step 0, group 1), ..., (step 1, group 0), ... A one-shot job
// (encoding) has a single step; a decoding job runs until every group has sent its `done`
// packet, which passes through every stage (and frees that group's KV caches) and removes the
// group from later steps. Because the order is fixed, the same order can be replayed by the
// simulator in schedule/ before anything runs, and a run is deterministic whatever the
// timing of arrivals.
//
// A serving job (Note [Lanes] in service/batcher.h) cannot keep that order: its groups are
// lanes that step when they have requests, and an idle lane sends nothing. Its stages run
// `by_arrival`: each input as it comes (one link delivers a group's steps in order), still
// within the consumer's credits, until every group has sent its done packet. Each lane has one
// step in flight at a time, so a stage never holds more inputs than there are groups.
//
// Errors: an exception on the stage's thread (a bad tensor, a dead peer on the data plane)
// reaches the parent as (failed_atom, "<stage name>: <what>") and the stage stops.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "actors/stage_progress.h"
#include "runtime/comm/message_plane.h"
#include "runtime/device.h"

namespace libai::actors {

// What a stage computes: a model stage's layers, or synthetic work in tests and benchmarks.
// Runs on the stage's pinned thread only.
class StageCompute {
 public:
  virtual ~StageCompute() = default;
  virtual models::TensorMap forward(int group, const models::TensorMap& inputs) = 0;
  // The group finished: drop what the stage kept for it (its KV caches).
  virtual void release(int /*group*/) {}
};

// One end of a link between actors.
struct Route {
  caf::actor actor;           // null: nobody (outputs are dropped, no credits are returned)
  int node = 0;               // the process (message-plane rank) of that actor
  // The link's id: the message-plane channel of its packets, and (credit_channel) of the
  // credits for it. Credits name it too: (credit_atom, slots, channel).
  std::uint32_t channel = 0;
  std::string name;           // "stage 2", "the driver": for what a stage waits for
};

struct StageRoutes {
  Route upstream;             // credits go back there; its channel is the link into this stage
  Route downstream;           // outputs go there
  int downstream_slots = 1;   // the consumer's input quota: the credits we start with
  // This stage's own input quota, the credits its producer holds: a producer with more packets
  // in flight (a bug or a hostile peer) fails the stage instead of growing its buffer. 0: not
  // checked.
  int input_slots = 0;
};
using StageRoutesPtr = std::shared_ptr<const StageRoutes>;

struct StageSetup {
  std::string name;                 // "stage 1 (dp 0, tp 1)"
  int node = 0;                     // this process's node rank
  Device device = Device::cpu();    // the pinned thread computes with this device's budget
  double slowdown = 1.0;            // emulated slower device: sleeps (slowdown - 1) x compute
  std::shared_ptr<StageCompute> compute;
  std::vector<int> groups;          // the groups it serves, in program order
  bool by_arrival = false;          // Note [Stage programs]: inputs in arrival order (serving)
  // Packets and credits to other nodes (actors/packet_inbox.h); null in one process.
  std::shared_ptr<comm::MessagePlane> plane;
  caf::actor parent;                // (finished_atom, StageReport bytes) or (failed_atom, text)
  std::shared_ptr<StageProgress> progress;  // for the cluster's watchdog (null: none)
  // Tests: each event as it happens on the actor ("arrive g0s0", "fire g0s0", "send g0s0",
  // "credit"). Called from the actor's handlers, one at a time.
  std::function<void(const std::string&)> trace;
};

caf::actor spawn_stage(caf::actor_system& system, StageSetup setup);

// Actions a stage may have fired and not yet computed (its current one and the next, queued on
// its thread): an input buffer needs this many slots - 1 beyond double buffering.
constexpr int kStageActionsInFlight = 2;

// The two halves of moving a packet to `to` from a process `from_node`. On a pinned thread,
// prepare_output() leaves a packet for a consumer in this process as a pointer, and sends one
// for a consumer in another process through the message plane (its tensors as they are; it
// returns once their bytes left). On the actor, deliver() then sends the pointer.
StageOutput prepare_output(Packet packet, const Route& to, int from_node,
                           comm::MessagePlane* plane);
void deliver(caf::event_based_actor* self, const Route& to, const StageOutput& output);

// Gives `slots` freed input slots of the link `to.channel` back to its producer `to`: a CAF
// message in this process, a message-plane message to another (which does not block).
void send_credit(caf::event_based_actor* self, const Route& to, int from_node,
                 comm::MessagePlane* plane, std::uint32_t slots = 1);

}  // namespace libai::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(libai::actors::StageRoutesPtr)
