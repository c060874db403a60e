#include "actors/packet_inbox.h"

#include <string>
#include <vector>

#include "actors/packet_message.h"
#include "runtime/comm/communicator.h"
#include "runtime/error.h"

namespace libai::actors {

void PacketInbox::add(std::uint32_t channel, caf::actor actor) {
  LIBAI_CHECK(actor != nullptr, "node ", node_, ": no actor for channel ", channel);
  std::lock_guard lock(mutex_);
  const bool fresh = actors_.emplace(channel, std::move(actor)).second;
  LIBAI_CHECK(fresh, "node ", node_, ": channel ", channel, " has a receiver already");
}

std::uint64_t PacketInbox::bytes_received() const {
  std::lock_guard lock(mutex_);
  return bytes_received_;
}

caf::actor PacketInbox::actor_of(const comm::IncomingMessage& m) const {
  std::lock_guard lock(mutex_);
  auto it = actors_.find(m.channel());
  LIBAI_CHECK_KIND(CorruptInput, it != actors_.end(), "node ", node_, ": a ",
                   m.channel() & kCreditChannelBit ? "credit" : "packet", " from node ", m.from(),
                   " on channel ", m.channel() & ~kCreditChannelBit,
                   ", which no actor of this node receives");
  return it->second;
}

void PacketInbox::handle(comm::IncomingMessage& m) {
  const caf::actor actor = actor_of(m);
  const std::uint32_t link = m.channel() & ~kCreditChannelBit;
  const auto where = [&] {
    return str_cat("node ", node_, ": a ", m.channel() & kCreditChannelBit ? "credit" : "packet",
                   " from node ", m.from(), " on channel ", link, ": ");
  };
  if (m.channel() & kCreditChannelBit) {
    wire::Credit credit;
    try {
      credit = wire::decode<wire::Credit>(m.header());
    } catch (const CorruptInput& e) {
      LIBAI_THROW(CorruptInput, where(), e.what());
    }
    LIBAI_CHECK_KIND(CorruptInput, m.payload_bytes() == 0, where(), "carries ", m.payload_bytes(),
                     " bytes of payload");
    caf::anon_send(actor, credit_atom::value, credit.slots, link);
    return;
  }
  Packet packet;
  try {
    packet = read_packet(m, limits_);
  } catch (const CorruptInput& e) {
    LIBAI_THROW(CorruptInput, where(), e.what());
  }
  {
    std::lock_guard lock(mutex_);
    bytes_received_ += m.payload_bytes();
  }
  caf::anon_send(actor, packet_atom::value,
                 PacketPtr(std::make_shared<const Packet>(std::move(packet))));
}

void send_packet(comm::MessagePlane& plane, int node, std::uint32_t channel, const Packet& packet) {
  wire::PacketHeader header;
  header.group = std::uint32_t(packet.group);
  header.step = std::uint32_t(packet.step);
  header.done = packet.done;
  header.gradient = packet.gradient;
  header.chunk = std::uint32_t(packet.chunk);
  std::vector<Tensor> parts;  // keeps contiguous copies alive until the bytes left
  std::vector<comm::ConstBlock> blocks;
  for (const auto& [name, tensor] : packet.tensors) {
    LIBAI_CHECK(tensor.defined(), "packet ", describe(packet), ": tensor '", name,
                "' is undefined");
    LIBAI_CHECK(tensor.device().is_cpu(), "packet ", describe(packet), ": tensor '", name,
                "' is on ", tensor.device().str(), "; the message plane moves CPU tensors");
    Tensor t = tensor.is_contiguous() ? tensor : tensor.clone_raw();
    header.tensors.push_back({name, wire::TensorHeader{t.dtype(), t.shape(), t.nbytes(), 0}});
    header.bytes += t.nbytes();
    blocks.push_back({t.data_ptr(), t.nbytes()});
    parts.push_back(std::move(t));
  }
  plane.send(node, channel, wire::encode(header), blocks);
}

void send_credit_message(comm::MessagePlane& plane, int node, std::uint32_t link,
                         std::uint32_t slots) {
  plane.send(node, credit_channel(link), wire::encode(wire::Credit{slots, 0}), {});
}

std::shared_ptr<comm::MessagePlane> make_node_message_plane(
    std::shared_ptr<comm::Communicator> data_plane, std::chrono::milliseconds timeout) {
  LIBAI_CHECK(data_plane != nullptr, "the message plane needs a data plane");
  // Note [Choosing the message plane]
  // Over shm, its own rings: the communicator only tells the ranks where they are, at set-up.
  if (std::string(data_plane->backend()) == "shm")
    return comm::make_shm_message_plane(*data_plane, timeout);
  return comm::make_p2p_message_plane(std::move(data_plane), timeout);
}

NodePlane start_node_plane(std::shared_ptr<comm::Communicator> data_plane,
                           std::chrono::milliseconds timeout,
                           comm::MessagePlane::ErrorHandler on_error) {
  NodePlane node;
  node.plane = make_node_message_plane(std::move(data_plane), timeout);
  node.inbox = std::make_shared<PacketInbox>(node.plane->rank());
  // The plane owns its handler and so keeps the inbox alive while messages may come.
  node.plane->start([inbox = node.inbox](comm::IncomingMessage& m) { inbox->handle(m); },
                    std::move(on_error));
  return node;
}

}  // namespace libai::actors
