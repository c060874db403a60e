// The message plane: how the processes (nodes) of a job hand each other the actor runtime's
// packets and credits without going through CAF. A message is a channel id, a small header
// (a few hundred bytes: Cap'n Proto, say) and payload blocks (a packet's tensors, sent as
// they are: no packing copy); the receiving process's one receive thread hands each message
// to a handler, which reads the payload straight into memory of its own (the tensors it
// allocated from the header).
//
//   auto plane = comm::make_shm_message_plane(world, timeout);      // same host
//   // or comm::make_p2p_message_plane(ucx_world, timeout)            // across hosts
//   plane->start([&](comm::IncomingMessage& m) {                      // on the receive thread
//     Header h = decode(m.header());
//     Tensor t = Tensor::empty(h.shape);
//     m.read(t.data(), t.nbytes());                                   // the payload, in order
//     deliver(m.from(), m.channel(), t);
//   }, [&](const std::string& error) { fail_the_job(error); });
//   plane->send(peer, /*channel=*/7, header_bytes, {{t.data(), t.nbytes()}});
//
// Rules every implementation keeps:
// - Messages from one sender are handed over in the order they were sent (per sender, over
//   all channels); the handler runs on the plane's receive thread, one message at a time.
// - The receive side is always posted: a message is taken as soon as its first bytes arrive,
//   whatever the handler's consumers are doing (their memory is bounded by the runtime's
//   credits, not by the plane).
// - send() may be called from any thread; messages to one peer are never interleaved. It
//   returns once the payload's memory may be reused (its bytes left for the peer or sit in
//   the plane's own buffers).
// - Nothing waits without a deadline: a peer that died makes send() and the receive thread
//   fail within about a second with a CommunicationError naming the peer; a peer that is
//   alive but does not drain its side makes send() fail after the timeout. abort() (from the
//   control plane, which saw a node die or hang) wakes every blocked call at once. After any
//   failure the plane is broken: later sends throw, and on_error is told once of a failure
//   the plane found itself (a dead peer, a timeout, a handler's exception, a malformed
//   message); abort()'s caller knows its reason, so on_error is not told of it.
// - Destroying a plane closes it; the ranks of a plane close theirs at about the same time
//   (a p2p plane waits, at most 10 s, for every peer's last message).
// - A handler that throws breaks the plane the same way (on_error gets its message).
// - A handler must read exactly payload_bytes() in total; what it leaves unread is an error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace libai::comm {

class Communicator;

struct ConstBlock {
  const void* data = nullptr;
  std::size_t bytes = 0;
};

// One message on the receive thread, valid during the handler call only.
class IncomingMessage {
 public:
  virtual ~IncomingMessage() = default;
  virtual int from() const = 0;  // the sender's rank
  virtual std::uint32_t channel() const = 0;
  virtual std::span<const std::uint8_t> header() const = 0;
  virtual std::size_t payload_bytes() const = 0;
  // Copies the next `bytes` of the payload into `dst`, waiting for them if they are still on
  // their way. Throws CommunicationError when that would pass the end of the payload, or when
  // the sender died or the plane was aborted meanwhile.
  virtual void read(void* dst, std::size_t bytes) = 0;
};

class MessagePlane {
 public:
  using Handler = std::function<void(IncomingMessage&)>;
  using ErrorHandler = std::function<void(const std::string&)>;

  virtual ~MessagePlane() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* transport() const = 0;  // "shm", "ucx"

  // Starts the receive thread. Call it once on every rank before any rank sends (a message
  // that arrives earlier waits in the plane until then).
  virtual void start(Handler handler, ErrorHandler on_error) = 0;

  // Sends one message to `peer` (another rank). Throws CommunicationError on failure (see
  // the rules above); `header` is at most kMaxMessageHeader bytes.
  virtual void send(int peer, std::uint32_t channel, std::span<const std::uint8_t> header,
                    std::span<const ConstBlock> payload) = 0;

  // Breaks the plane: every blocked send and read throws CommunicationError(reason), the
  // receive thread ends. Safe from any thread, any number of times (the first reason stays).
  virtual void abort(const std::string& reason) = 0;
  virtual bool broken() const = 0;
};

inline constexpr std::size_t kMaxMessageHeader = 64 * 1024;

// Same host: shared-memory rings between every pair of ranks (runtime/comm/shm_transport.h).
// `world` (any communicator over the same ranks) is used once, to exchange where the rings
// are; every rank calls this collectively.
std::shared_ptr<MessagePlane> make_shm_message_plane(Communicator& world,
                                                     std::chrono::milliseconds timeout);

// Any host: messages as point-to-point transfers of `world` (the ucx communicator across
// hosts): a header transfer then one per payload block, on tags of the plane's own. Every rank
// calls this collectively; the plane keeps `world` alive.
std::shared_ptr<MessagePlane> make_p2p_message_plane(std::shared_ptr<Communicator> world,
                                                     std::chrono::milliseconds timeout);

}  // namespace libai::comm
