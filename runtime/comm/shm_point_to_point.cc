// Point to point of the shm communicator: every ordered pair of ranks has a byte ring in the
// receiver's segment. A send writes a MessageHeader then the payload as ring space allows; the
// receiver's operations thread reads the header, matches it with the first posted receive of
// the same (group, tag) from that peer, and streams the payload straight into that tensor, or
// aside into a buffer of its own when no receive is posted yet (the next matching receive
// takes it). So messages of one (peer, tag) match in order, different tags may be received in
// any order, and two ranks may send to each other before receiving. Both sides progress in
// the background, also while a collective waits, so a large send never blocks the thread.
#include <algorithm>
#include <cstring>

#include "runtime/comm/shm_world.h"
#include "runtime/error.h"

namespace libai::comm::shm {

void ShmWorld::complete(const TransferPtr& transfer) {
  in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), transfer));
  transfer->work->finish(nullptr);
}

void ShmWorld::post(const TransferPtr& transfer) {
  transfer->deadline = Clock::now() + timeout_;
  in_flight_.push_back(transfer);
  if (transfer->is_send) {
    sends_[std::size_t(transfer->peer)].push_back(transfer);
    progress_sends(transfer->peer);
    return;
  }
  Inbound& in = inbound_[std::size_t(transfer->peer)];
  // A message copied aside earlier is the first match.
  for (auto it = in.unexpected.begin(); it != in.unexpected.end(); ++it) {
    Unexpected& u = **it;
    if (u.claimed || u.group != transfer->group || u.tag != transfer->tag) continue;
    LIBAI_CHECK_KIND(CommunicationError, u.data.size() == transfer->bytes, transfer->what,
                     ": the matching message has ", u.data.size(), " bytes");
    if (u.received < u.data.size()) {
      u.claimed = transfer;  // still arriving: it completes this receive when it is whole
      return;
    }
    if (!u.data.empty()) std::memcpy(transfer->data, u.data.data(), u.data.size());
    in.unexpected.erase(it);
    complete(transfer);
    return;
  }
  in.posted.push_back(transfer);
  progress_receives(transfer->peer);
}

bool ShmWorld::progress() {
  bool moved = false;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    moved = progress_sends(q) | moved;
    moved = progress_receives(q) | moved;
  }
  return moved;
}

bool ShmWorld::progress_sends(int peer) {
  auto& queue = sends_[std::size_t(peer)];
  if (queue.empty()) return false;
  Ring ring = outbound_ring(peer);
  bool moved = false;
  while (!queue.empty()) {
    Transfer& t = *queue.front();
    if (!t.header_done) {
      if (ring.writable() < sizeof(MessageHeader)) break;
      const MessageHeader h{t.group, t.tag, t.bytes};
      ring.write(&h, sizeof h);
      t.header_done = moved = true;
    }
    const std::size_t n = ring.write(t.data + t.done, t.bytes - t.done);
    t.done += n;
    moved = moved || n > 0;
    if (t.done < t.bytes) break;
    const TransferPtr done = queue.front();
    queue.pop_front();
    complete(done);
  }
  if (moved) ring_doorbell(header(peer).doorbell);
  return moved;
}

bool ShmWorld::progress_receives(int peer) {
  Inbound& in = inbound_[std::size_t(peer)];
  Ring ring = inbound_ring(peer);
  bool moved = false;
  for (;;) {
    if (!in.active) {
      if (!ring.read_exact(&in.current, sizeof in.current)) break;
      moved = in.active = true;
      in.received = 0;
      in.target = nullptr;
      in.buffer = nullptr;
      const auto match = std::find_if(in.posted.begin(), in.posted.end(), [&](const auto& t) {
        return t->group == in.current.group && t->tag == in.current.tag;
      });
      if (match != in.posted.end()) {
        in.target = *match;
        in.posted.erase(match);
        LIBAI_CHECK_KIND(CommunicationError, in.target->bytes == in.current.bytes,
                         in.target->what, ": the matching message has ", in.current.bytes,
                         " bytes");
        in.destination = in.target->data;
      } else {
        in.buffer = std::make_shared<Unexpected>();
        in.buffer->group = in.current.group;
        in.buffer->tag = in.current.tag;
        in.buffer->data.resize(std::size_t(in.current.bytes));
        in.unexpected.push_back(in.buffer);
        in.destination = in.buffer->data.data();
      }
    }
    const std::size_t n =
        ring.read(in.destination + in.received, std::size_t(in.current.bytes) - in.received);
    in.received += n;
    moved = moved || n > 0;
    if (in.buffer) in.buffer->received = in.received;
    if (in.received < in.current.bytes) break;
    in.active = false;
    if (in.target) {
      complete(in.target);
    } else if (const TransferPtr claimed = in.buffer->claimed) {
      if (!in.buffer->data.empty())
        std::memcpy(claimed->data, in.buffer->data.data(), in.buffer->data.size());
      in.unexpected.erase(std::find(in.unexpected.begin(), in.unexpected.end(), in.buffer));
      complete(claimed);
    }
  }
  if (moved) ring_doorbell(header(peer).doorbell);  // the sender may wait for space
  return moved;
}

void ShmWorld::check_transfers() {
  const auto now = Clock::now();
  for (const TransferPtr& t : in_flight_) {
    if (std::string cause = peer_failure({t->peer}, true); !cause.empty())
      LIBAI_THROW(CommunicationError, t->what, ": ", cause);
    if (now >= t->deadline) {
      LIBAI_THROW(CommunicationError, t->what, ": timed out after ", timeout_.count(),
                  " ms waiting for rank ", t->peer);
    }
  }
}

void ShmWorld::fail_everything(const std::string& reason) {
  const auto error = std::make_exception_ptr(CommunicationError(reason));
  for (const TransferPtr& t : in_flight_) t->work->finish(error);
  in_flight_.clear();
  for (auto& queue : sends_) queue.clear();
  for (Inbound& in : inbound_) in = Inbound{};
}

}  // namespace libai::comm::shm
