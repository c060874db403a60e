// The atoms and in-process message types of the actor runtime (CAF 0.17: atom_constant).
// Messages that cross processes carry Cap'n Proto bytes (wire::Bytes) next to an atom; the
// pointer types below never leave their process (CAF_ALLOW_UNSAFE_MESSAGE_TYPE).
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <vector>

#include "actors/packet.h"
#include "actors/wire/wire.h"

namespace libai::actors {

using packet_atom = caf::atom_constant<caf::atom("packet")>;      // an input arrives
// (credit_atom, uint32 slots, uint32 link): the consumer of `link` freed input slots
using credit_atom = caf::atom_constant<caf::atom("credit")>;
using computed_atom = caf::atom_constant<caf::atom("computed")>;  // a stage's thread finished
using failed_atom = caf::atom_constant<caf::atom("failed")>;      // an error, with its text
using finished_atom = caf::atom_constant<caf::atom("finished")>;  // a stage ran its program
using abort_atom = caf::atom_constant<caf::atom("abort")>;        // end the job now
using submit_atom = caf::atom_constant<caf::atom("submit")>;      // a job feeds stage 0
using join_atom = caf::atom_constant<caf::atom("join")>;          // a node asks to join
using assign_atom = caf::atom_constant<caf::atom("assign")>;      // node 0 hands out the plan
using ready_atom = caf::atom_constant<caf::atom("ready")>;        // a node's stages exist
using routes_atom = caf::atom_constant<caf::atom("routes")>;      // every stage's handle
using report_atom = caf::atom_constant<caf::atom("report")>;      // a stage's figures
using stop_atom = caf::atom_constant<caf::atom("stop")>;          // the job is over
using ack_atom = caf::atom_constant<caf::atom("ack")>;            // an abort note arrived
using ping_atom = caf::atom_constant<caf::atom("ping")>;          // a control-plane round trip
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using heartbeat_atom = caf::atom_constant<caf::atom("heartbeat")>;  // node 0 <-> every node

// What a stage's thread hands back to its actor after one action.
struct StageOutput {
  PacketPtr packet;      // for a consumer in this process (one in another was sent already)
  bool done = false;
  double seconds = 0;    // compute (and emulated slow-down) of the action
};
using StageOutputPtr = std::shared_ptr<const StageOutput>;

// The settings every actor system of the runtime uses: the middleman (remote actors), the
// types that cross processes announced (Cap'n Proto bytes), and `threads` CAF workers (the
// stages compute on threads of their own; CAF's only move messages).
void configure_actor_system(caf::actor_system_config& config, int threads = 2);

}  // namespace libai::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(libai::actors::PacketPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(libai::actors::StageOutputPtr)
