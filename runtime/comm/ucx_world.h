// Internal to the ucx communicator: this process's UCX worker connected to every rank of the
// world, with non-blocking tagged transfers (a ring step sends and receives at once, which
// the blocking UcxEndpoint calls cannot) and the failure rules of the communicator.
//
//   UcxWorld world(rendezvous_options);              // meets the others, connects, handshakes
//   auto out = world.send(1, tag, data, bytes, owner); // non-blocking; `owner` keeps data alive
//   auto in = world.recv(3, tag, buffer, bytes, owner);
//   world.wait({out, in}, deadline, what);           // progress until both are done, or throw
//
// One thread owns a UcxWorld (its worker is UCS_THREAD_MODE_SINGLE).
//
// Note [UCX failure detection]
// Endpoints use peer error handling, so the death of a process closes its TCP connections and
// the endpoints to it fail within milliseconds (see ucx_transport.h for why same-host traffic
// then goes over TCP loopback). wait() fails when a transfer it waits for fails, when the
// endpoint of a peer it waits for has failed, when the deadline passes, or when another rank
// sent an abort note. A rank whose operation fails calls abort(reason): it sends the reason to
// every rank it can still reach, so ranks that wait on a live but failed neighbour learn the
// first cause (e.g. "rank 2 failed") at once instead of timing out. A neighbour's note can
// arrive just after its connection reports the close, so a failure other than a note is only
// final 100 ms after it was first seen (settled_failure). After abort the world is broken:
// later transfers throw. Buffers of transfers UCX still owns stay alive (the owner pointers)
// until the world is destroyed.
//
// Note [UCX shutdown]
// Closing a TCP connection with unread incoming data resets it and can drop what we sent last,
// so the destructor of an unbroken world first exchanges a goodbye with every rank (all ranks'
// operations are then complete everywhere), flushes, and only then closes; bounded by the
// timeout (at most 10 s), and a peer that failed or aborted counts as gone. A broken world
// skips the goodbye. Either way the worker is progressed until UCX is quiet for 100 ms before
// it is destroyed (UCX 1.13 asserts when a wire-up reply is still queued then).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "runtime/comm/rendezvous.h"

struct ucp_ep;

namespace libai::comm {
class UcxContext;
class UcxWorker;
}  // namespace libai::comm

namespace libai::comm::detail {

using Clock = std::chrono::steady_clock;

// Note [UCX tags]: [kind:4][group:12][sender world rank:12][low:36]. Collectives put
// [sequence:20][step:16] in the low bits, point to point the caller's 32-bit tag; so groups,
// consecutive collectives, steps of one collective and senders never match each other's
// messages.
enum class TagKind : std::uint8_t {
  handshake = 1,
  header = 2,
  data = 3,
  p2p = 4,
  abort = 5,
  goodbye = 6
};
constexpr int kMaxWorldSize = 1 << 12;
constexpr std::uint32_t kMaxGroups = 1u << 12;
constexpr std::uint32_t kMaxSteps = 1u << 16;
std::uint64_t make_tag(TagKind kind, std::uint32_t group, int sender, std::uint64_t low);
std::uint64_t collective_tag(TagKind kind, std::uint32_t group, int sender, std::uint32_t sequence,
                             std::uint32_t step);

// How a polling thread waits: spins (yielding) for the first 200 us without progress, which
// catches the next message of a collective at once; then sleeps 50 us between polls, so that
// a rank waiting for a slow peer leaves the cores to the processes that compute (4 ranks on 2
// loaded cores ran their large collectives faster this way than spinning for 1 ms).
class IdleBackoff {
 public:
  void busy() { idle_since_ = {}; }
  void idle();
  // The same, sleeping through `sleep` (a wait that new work can end early).
  void idle(const std::function<void(std::chrono::microseconds)>& sleep);

 private:
  Clock::time_point idle_since_{};
};

// One non-blocking send or receive. UCX writes `done`, `status` and `length` from progress.
struct Transfer {
  bool done = false;
  int status = 0;  // ucs_status_t
  std::size_t length = 0;
  std::size_t bytes = 0;
  int peer = -1;  // world rank
  bool is_send = false;
  std::uint64_t tag = 0;
  void* request = nullptr;            // UCX's, while in flight
  std::shared_ptr<const void> owner;  // keeps the buffer alive while UCX may use it
};
using TransferPtr = std::shared_ptr<Transfer>;

class UcxWorld {
 public:
  // Rendezvous, one endpoint per other rank, and a handshake with every rank; throws
  // CommunicationError (naming the address or the unreachable rank) after `timeout`.
  UcxWorld(const RendezvousOptions& options);
  ~UcxWorld();
  UcxWorld(const UcxWorld&) = delete;
  UcxWorld& operator=(const UcxWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  TransferPtr send(int peer, std::uint64_t tag, const void* data, std::size_t bytes,
                   std::shared_ptr<const void> owner);
  TransferPtr recv(int peer, std::uint64_t tag, void* data, std::size_t bytes,
                   std::shared_ptr<const void> owner);

  // Progresses until every transfer is done. Throws CommunicationError "<what()>: <cause>"
  // (Note [UCX failure detection]); the caller then calls abort().
  void wait(std::span<const TransferPtr> transfers, Clock::time_point deadline,
            const std::function<std::string()>& what);
  // One round of progress; returns whether UCX did anything.
  bool progress();
  // Why `transfer` cannot complete (an abort note arrived, its peer failed, it failed), or "".
  std::string failure(const Transfer& transfer);
  // failure(), but a failure that is not a note only once 100 ms have passed since the first
  // one was seen: the note that names the first cause may still be on its way.
  std::string settled_failure(const Transfer& transfer);

  // Breaks the world after an error: cancels receives, tells every reachable rank `reason`.
  void abort(const std::string& reason);
  // From any thread: the owning thread's current and later waits throw
  // CommunicationError(reason); it then calls abort().
  void request_abort(const std::string& reason);
  bool abort_requested() const { return abort_requested_.load(std::memory_order_acquire); }
  std::string requested_reason() const;
  bool broken() const { return !broken_reason_.empty(); }
  const std::string& broken_reason() const { return broken_reason_; }

 private:
  struct Endpoint;
  TransferPtr post(TransferPtr transfer, void* data);
  void exchange_with_all(TagKind kind, bool tolerate_failures, Clock::time_point deadline);
  void sweep();
  void shutdown();
  bool noted() const;

  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<UcxContext> context_;
  std::unique_ptr<UcxWorker> worker_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;  // by world rank; null for our own
  std::vector<TransferPtr> in_flight_;                // transfers UCX still owns
  bool completions_ = false;                          // some transfer finished since the sweep
  TransferPtr abort_listener_;
  std::shared_ptr<std::vector<char>> abort_note_;
  std::string broken_reason_;
  Clock::time_point failure_seen_{};
  std::atomic<bool> abort_requested_{false};
  mutable std::mutex requested_mutex_;
  std::string requested_reason_;
};

}  // namespace libai::comm::detail
