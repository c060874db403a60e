// Internal to the shm communicator: this process's view of the job's shared memory (its own
// segment and every peer's), the thread that runs the queued operations in call order, point
// to point through the rings, and the barrier the collectives are built from.
//
//   ShmWorld world(options);                     // rendezvous, segments, unlink, CMA probe
//   world.submit({.run = [&] { ... }, .work = w}); // on the operations thread, in order
//   world.barrier(group);                        // inside a collective: every member arrived
//
// Segment of rank r ("/libai-<job>-comm-<r>"), in order: SegmentHeader; GroupSlot per group
// id (its barrier counter and the collective header of its current collective); two staging
// halves; one inbound point-to-point ring per peer (written by that peer).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/collective_header.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/queued_work.h"
#include "runtime/comm/shm_communicator.h"
#include "runtime/comm/shm_transport.h"

namespace libai::comm::shm {

constexpr std::uint32_t kMaxGroups = 64;
constexpr std::size_t kStagingHalf = 4u << 20;
constexpr std::size_t kPointToPointRing = 1u << 20;

using detail::collective_name;
using detail::CollectiveHeader;
using detail::CollectiveOp;

struct alignas(64) GroupSlot {
  std::atomic<std::uint64_t> barrier{0};  // barriers this rank has arrived at, in this group
  CollectiveHeader header;
};

// A group as the world sees it. The operations thread alone touches the counters.
struct GroupView : detail::GroupView {
  std::uint64_t barriers = 0;  // barriers passed
  std::uint32_t sequence = 0;  // collectives started
};

// The Work of a queued operation (queued_work.h).
using ShmWork = detail::QueuedWork;
using ShmWorkPtr = detail::QueuedWorkPtr;

// A point-to-point transfer in flight (ring progress, operations thread only).
struct Transfer {
  bool is_send = false;
  int peer = 0;  // world rank
  std::uint32_t group = 0, tag = 0;
  std::uint8_t* data = nullptr;
  std::size_t bytes = 0, done = 0;
  bool header_done = false;
  Clock::time_point deadline;
  std::string what;
  ShmWorkPtr work;
};
using TransferPtr = std::shared_ptr<Transfer>;

// A message that arrived before its receive was posted, copied aside.
struct Unexpected {
  std::uint32_t group = 0, tag = 0;
  std::vector<std::uint8_t> data;
  std::size_t received = 0;
  TransferPtr claimed;  // a receive posted while the message was still arriving
};

// On the ring header of every message: the receiver matches (group, tag) in order.
struct MessageHeader {
  std::uint32_t group = 0, tag = 0;
  std::uint64_t bytes = 0;
};

// The receive side of the ring from one peer.
struct Inbound {
  std::deque<TransferPtr> posted;  // receives that no message matched yet, in order
  std::deque<std::shared_ptr<Unexpected>> unexpected;
  bool active = false;  // a message is arriving
  MessageHeader current;
  std::uint8_t* destination = nullptr;
  TransferPtr target;                  // the receive it goes to, or
  std::shared_ptr<Unexpected> buffer;  // where it is copied aside
  std::size_t received = 0;
};

// One queued operation: `run` (a collective, to completion) or `post` (a transfer that then
// progresses in the background).
struct Task {
  std::function<void()> run;
  TransferPtr post;
  ShmWorkPtr work;
};

class ShmWorld {
 public:
  explicit ShmWorld(const ShmGroupOptions& options);
  // Runs what is queued and the transfers in flight (each bounded by its deadline), then stops.
  ~ShmWorld();
  ShmWorld(const ShmWorld&) = delete;
  ShmWorld& operator=(const ShmWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  bool cross_memory_attach() const { return cma_; }
  std::uint32_t next_group_id = 1;  // operations thread only; group 0 is the world

  // Throws the world's error at once when it is broken.
  void submit(Task task);
  void throw_if_broken() const;

  // Breaks the world: every wait throws CommunicationError(reason) at once, every later call
  // throws it, the peers waiting on this rank learn it. The first reason stays.
  void abort(const std::string& reason);
  bool broken() const { return abort_.tripped(); }

  // Inside a collective on the operations thread: arrive at the group's next barrier and wait
  // for every member; `what` prefixes the errors.
  void barrier(GroupView& group, const std::function<std::string()>& what);
  GroupSlot& slot(int world_rank, std::uint32_t group);
  std::uint8_t* staging(int world_rank, int half);
  const ProcessId& process(int world_rank) const { return peers_[std::size_t(world_rank)]; }
  // "" while the given ranks are fine, else the first cause: a peer's own broken reason, or
  // (thorough) that its process is gone.
  std::string peer_failure(const std::vector<int>& world_ranks, bool thorough) const;

 private:
  std::uint8_t* base(int world_rank) const;
  SegmentHeader& header(int world_rank) const;
  Ring inbound_ring(int from) const;
  Ring outbound_ring(int to) const;

  void main();
  void execute(Task& task);
  void fail_everything(const std::string& reason);
  // Point to point (shm_point_to_point.cc).
  void post(const TransferPtr& transfer);
  bool progress();  // one round over every peer; throws on a protocol error
  bool progress_sends(int peer);
  bool progress_receives(int peer);
  void check_transfers();  // deadlines and peers of the transfers in flight
  bool transfers_idle() const { return in_flight_.empty(); }
  void complete(const TransferPtr& transfer);

  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_;
  bool cma_ = false;
  std::size_t slots_offset_ = 0, staging_offset_ = 0, rings_offset_ = 0, ring_stride_ = 0;
  Segment own_;
  std::vector<Segment> peer_segments_;  // by world rank; our own slot empty
  std::vector<ProcessId> peers_;
  AbortState abort_;

  std::thread thread_;
  std::mutex mutex_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  // Operations thread only:
  std::vector<std::deque<TransferPtr>> sends_;  // by peer, in order
  std::vector<Inbound> inbound_;
  std::vector<TransferPtr> in_flight_;  // every unfinished transfer, for deadlines and peers
};

}  // namespace libai::comm::shm
