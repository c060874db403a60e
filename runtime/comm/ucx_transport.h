// A small RAII wrapper over UCX's tag API: the byte transport under the ucx communicator and
// the cross-process tensor channels.
//
//   libai::comm::UcxContext context;                 // ucp_init with the TAG feature
//   libai::comm::UcxWorker worker(context, "rank 0");
//   std::vector<std::uint8_t> mine = worker.address();  // send to the peer over the control plane
//   libai::comm::UcxEndpoint peer(worker, peer_address_bytes, "rank 1");
//   peer.send(/*tag=*/7, data, bytes, std::chrono::seconds(10));
//   std::size_t got = peer.recv(/*tag=*/8, out, capacity, std::chrono::seconds(10));
//
// Every blocking call drives the worker's progress loop itself and has a deadline: when it
// passes, the call throws CommunicationError naming the peer and the tag instead of hanging.
// Any UCX failure (ucs_status_string) also becomes a CommunicationError.
//
// Threading: one worker and its endpoints belong to one thread (UCS_THREAD_MODE_SINGLE).
// Tag matching is per worker, not per endpoint: UcxEndpoint::recv takes any message with that
// tag; put the sender's rank into the tag when several peers talk to one worker.
// UCX headers stay out of this header so that users of libai_runtime need not see them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

struct ucp_context;
struct ucp_worker;
struct ucp_ep;

namespace libai::comm {

using UcxTimeout = std::chrono::milliseconds;

// The process-wide UCX state (transports, memory registration cache). Create it after fork().
class UcxContext {
 public:
  UcxContext();
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context* native() const { return context_; }

 private:
  ucp_context* context_ = nullptr;
};

// A progress engine with its own address; the context must outlive it.
class UcxWorker {
 public:
  // `name` only labels log lines and error messages ("rank 0").
  explicit UcxWorker(UcxContext& context, std::string name = "local");
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // The worker's address as opaque bytes, to hand to a peer for UcxEndpoint.
  std::vector<std::uint8_t> address() const;

  // Receives one message with exactly this tag into `data` (at most `capacity` bytes) and
  // returns its length. Throws CommunicationError on timeout (the receive is cancelled first,
  // so `data` is never written after the call returns), truncation or a UCX error.
  // `peer` only names the expected sender in error messages.
  std::size_t recv(std::uint64_t tag, void* data, std::size_t capacity, UcxTimeout timeout,
                   const std::string& peer = "any peer");

  // One round of progress; returns whether anything happened.
  bool progress();

  const std::string& name() const { return name_; }
  ucp_worker* native() const { return worker_; }

 private:
  ucp_worker* worker_ = nullptr;
  std::string name_;
};

// A connection to a peer's worker, made from the peer's address bytes; the worker must outlive
// it. Peer failures are reported (UCP_ERR_HANDLING_MODE_PEER), so a dead peer is an error, not
// a hang. After a failed or timed-out send the endpoint is closed and every later send throws.
// Cost: UCX 1.13 has no peer-failure support in sysv/posix/cma, so this mode runs same-host
// traffic over TCP loopback. The mode without it cannot cancel a timed-out rendezvous send
// (force-close leaves it pending), so it would need sends that own their buffers.
class UcxEndpoint {
 public:
  UcxEndpoint(UcxWorker& worker, std::span<const std::uint8_t> peer_address,
              std::string peer_name = "peer");
  ~UcxEndpoint();
  UcxEndpoint(UcxEndpoint&&) noexcept;
  UcxEndpoint& operator=(UcxEndpoint&&) noexcept;

  // Sends `size` bytes with `tag` and returns once the buffer may be reused. Large messages
  // (rendezvous) complete only when the peer has received them, hence the timeout.
  void send(std::uint64_t tag, const void* data, std::size_t size, UcxTimeout timeout);

  // worker().recv(...) with this peer's name in error messages.
  std::size_t recv(std::uint64_t tag, void* data, std::size_t capacity, UcxTimeout timeout);

  // Graceful close: flushes and waits (at most `timeout`) for the peer to acknowledge, which
  // needs the peer to progress. Returns whether it was acknowledged; the endpoint is closed
  // either way. The destructor closes without waiting for the peer.
  bool close(UcxTimeout timeout);

  const std::string& peer_name() const;
  bool broken() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace libai::comm
