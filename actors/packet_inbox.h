// Packets and credits between nodes, on the message plane (runtime/comm/message_plane.h). A
// packet for another node is one message: its Cap'n Proto header (wire::PacketHeader) and its
// tensors' bytes as they are, one payload block per tensor (no packing copy). Each node's
// inbox is the handler of its plane: it allocates every tensor from the header and reads its
// bytes straight into it, then sends (packet_atom, PacketPtr) to the actor of the message's
// channel, so that a packet from another node looks exactly like one from this node. Credits
// travel the same way and arrive as the same (credit_atom, slots, link) a local consumer sends.
//
//   auto inbox = std::make_shared<PacketInbox>(node_rank);
//   plane->start([inbox](comm::IncomingMessage& m) { inbox->handle(m); }, on_error);
//   inbox->add(link, consumer);                               // packets on `link`
//   inbox->add(credit_channel(link), producer);               // credits for `link`
//   send_packet(*plane, consumer_node, link, packet);         // on a stage's pinned thread
//   send_credit_message(*plane, producer_node, link, 1);      // from the consumer's actor
//
// Channels are the links' ids (actors/pipeline.h channel_into_slot, actors/train_pipeline.h
// train_channel): one per link and direction, so a channel names exactly one receiving actor.
// A credit for a link travels on credit_channel(link), the link with the top bit set.
//
// Errors: a message on a channel no actor of this node receives, or a header that does not
// decode, does not describe its payload or passes its PacketLimits (actors/packet_message.h),
// throws from the handler with a message naming the node, the sender and the channel; the plane
// then breaks and tells its on_error (the job fails with that message), never a crash.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "actors/messages.h"
#include "actors/packet_message.h"
#include "runtime/comm/message_plane.h"

namespace libai::actors {

constexpr std::uint32_t kCreditChannelBit = 0x8000'0000u;
inline std::uint32_t credit_channel(std::uint32_t link) { return link | kCreditChannelBit; }

class PacketInbox {
 public:
  explicit PacketInbox(int node, PacketLimits limits = {}) : node_(node), limits_(limits) {}

  // Where messages on `channel` go. Call it before any message on it can arrive (when the
  // actor is spawned: peers send only once they have their routes); each channel once.
  void add(std::uint32_t channel, caf::actor actor);

  // The plane's handler (runs on the plane's receive thread).
  void handle(comm::IncomingMessage& message);

  std::uint64_t bytes_received() const;

 private:
  caf::actor actor_of(const comm::IncomingMessage& message) const;

  const int node_;
  const PacketLimits limits_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uint32_t, caf::actor> actors_;
  std::uint64_t bytes_received_ = 0;
};

// Sends `packet` to the actor of `channel` on node `node`: its header, then its tensors'
// bytes as they are (a non-contiguous tensor is made contiguous first). Blocks until the bytes
// left (MessagePlane::send): call it on a pinned thread, not on an actor.
void send_packet(comm::MessagePlane& plane, int node, std::uint32_t channel, const Packet& packet);

// Sends a credit for `slots` freed input slots of `link` to the producer's node; returns at
// once (the message has no payload).
void send_credit_message(comm::MessagePlane& plane, int node, std::uint32_t link,
                         std::uint32_t slots);

// A node's side of the message plane; both null in a job of one process.
struct NodePlane {
  std::shared_ptr<comm::MessagePlane> plane;
  std::shared_ptr<PacketInbox> inbox;
  explicit operator bool() const { return plane != nullptr; }
};

// The node's message plane over its data-plane communicator, started with a new inbox as its
// handler; `on_error` hears of the plane's failures. Every node calls it once its data plane
// formed, before it reports its stages ready.
//
// Note [Choosing the message plane]
// The plane follows the data plane's communicator (Note [Choosing the transport] in
// actors/cluster/cluster_node.h): over the shm communicator, the shm message plane's own rings (the
// communicator only tells where they are); over any other (ucx between hosts), the
// communicator's own point-to-point transfers (make_p2p_message_plane).
NodePlane start_node_plane(std::shared_ptr<comm::Communicator> data_plane,
                           std::chrono::milliseconds timeout,
                           comm::MessagePlane::ErrorHandler on_error);

// The plane alone, not started (benchmarks): the transport of Note [Choosing the message plane].
std::shared_ptr<comm::MessagePlane> make_node_message_plane(
    std::shared_ptr<comm::Communicator> data_plane, std::chrono::milliseconds timeout);

}  // namespace libai::actors
