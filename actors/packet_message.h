// A packet as a message of the message plane (runtime/comm/message_plane.h), without CAF: the
// part of the packet inbox (actors/packet_inbox.h) that turns a received header and payload
// into a Packet, kept apart so that tests and tests/fuzz/fuzz_packet_header.cc drive it alone.
//
//   Packet p = read_packet(message);  // CorruptInput if the header does not describe the payload
//
// Everything in the header comes from another process: it is decoded by wire::decode (bounded
// tensor headers, Note [Bounded tensor headers] in actors/wire/wire.h), checked against the
// payload the message carries and against `PacketLimits`, and only then are the tensors
// allocated and their bytes read. Errors are CorruptInput saying what was wrong; the inbox adds
// the node, sender and channel.
#pragma once

#include <cstdint>

#include "actors/packet.h"
#include "actors/wire/wire.h"
#include "runtime/comm/message_plane.h"

namespace libai::actors {

struct PacketLimits {
  // The most payload bytes one packet may make this process allocate. The default is the
  // host's physical memory: a larger packet can never be held, so it is refused before the
  // allocation rather than failing in it (or, with overcommit, later in the page faults).
  std::uint64_t max_bytes = host_memory_bytes();
  static std::uint64_t host_memory_bytes();
};

// Decodes the message's header, checks it against its payload and `limits`, allocates the
// tensors and reads the payload into them. Throws CorruptInput for a header that does not decode
// or does not describe the payload; the message's read errors (CommunicationError) pass through.
Packet read_packet(comm::IncomingMessage& message, const PacketLimits& limits = {});

}  // namespace libai::actors
