// Shared-memory primitives for processes of one host: named segments, a doorbell to sleep on,
// single-producer/single-consumer byte rings, peer liveness, bounded waits with abort, and
// cross-memory attach (CMA). The shm communicator (shm_communicator.h) and the shm message plane
// (message_plane.h) are built from them; nothing here knows about tensors or collectives.
//
//   const std::string job = shm::random_job_id();            // one per job, chosen by rank 0
//   auto mine = shm::Segment::create(shm::segment_name(job, "comm", rank), bytes);
//   ... every rank learns the names, opens its peers' segments ...
//   ... a rendezvous round: every rank has attached ...
//   mine.unlink();                                           // /dev/shm is clean from here on
//   shm::Ring ring(ring_header, ring_data);                   // in the receiver's segment
//   ring.write(bytes, n); shm::ring_doorbell(peer_header.doorbell);
//
// Note [Same-host data plane]
// Why our own shared memory rather than UCX's: UCX 1.13 has no peer-failure handling on its
// shared-memory transports, so the ucx backend runs over TCP loopback at 0.01-0.2 of memcpy
// (bench/RESULTS.md). Here the bytes move through memory both processes map (or straight
// between the processes' own buffers with process_vm_readv/writev), and failure detection is
// ours:
// - liveness: every segment header names its owner's pid and start time (from /proc), so a
//   waiter checks its peers' processes every 100 ms: gone, a zombie, or a recycled pid means
//   dead, a CommunicationError naming the rank within about a second. A process that is alive
//   but stuck (SIGSTOP, a hung driver) is the control plane's to judge: it calls abort(), and
//   every wait is bounded by a deadline anyway.
// - a peer that failed for another reason marks its own header broken with the reason, so the
//   ranks waiting on it report the first cause rather than a timeout.
// - no leaks: segment names carry a random job id and the rank, so concurrent jobs never
//   collide, and each segment is shm_unlink'ed as soon as every rank has attached it (one
//   rendezvous round after creation) and on every error path. The memory lives on while it is
//   mapped; a job SIGKILLed after set-up leaves nothing in /dev/shm. (Killed inside the set-up
//   window itself, between create and that round, its segment stays: the window is a few ms.)
// - waits: spin briefly (a peer on the other core answers within microseconds), then sleep on
//   a futex in shared memory (the doorbell of the waiting process, which every peer rings
//   after a change the process may wait for), so that 4 processes on 2 cores never burn a core
//   waiting for each other. abort() rings the process's own doorbell: waiters wake at once.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace libai::comm::shm {

using Clock = std::chrono::steady_clock;

// A process as its peers check it: the pid alone can be recycled, the start time cannot.
struct ProcessId {
  std::int32_t pid = 0;
  std::uint64_t start_time = 0;  // clock ticks since boot, field 22 of /proc/<pid>/stat
};
ProcessId this_process();
// False once the process exited (even while it is an unreaped zombie) or its pid was reused.
bool process_alive(const ProcessId& process);

// 16 hex digits from the kernel's random source.
std::string random_job_id();
// "/libai-<job>-<kind>-<rank>": the name of rank's segment of one kind in one job.
std::string segment_name(const std::string& job, const std::string& kind, int rank);

// A mapping of a POSIX shared-memory object. The creator owns the name: unlink() removes it
// (at once, once every peer has it mapped), and the destructor removes it if that never
// happened (an error path). Throws CommunicationError naming the segment on failure.
class Segment {
 public:
  Segment() = default;
  static Segment create(const std::string& name, std::size_t bytes);
  // Maps an existing segment of exactly `bytes` bytes.
  static Segment open(const std::string& name, std::size_t bytes);
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;

  void unlink();
  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  bool owns_name_ = false;
};

// A futex word and its sleeper count, one per waiting process and kind of segment.
struct alignas(64) Doorbell {
  std::atomic<std::uint32_t> sequence{0};
  std::atomic<std::uint32_t> sleepers{0};
};
// Tells the owner of `bell` that something changed (after the change is published).
void ring_doorbell(Doorbell& bell);

// What every segment starts with. `broken` and `reason` are written once, by the owner, when it
// fails or is aborted, for the peers that wait on it.
struct SegmentHeader {
  std::uint64_t magic = 0;
  std::int32_t rank = 0, size = 0;
  ProcessId owner;
  Doorbell doorbell;
  std::atomic<std::uint32_t> broken{0};
  char reason[512] = {};
};
void mark_broken(SegmentHeader& header, const std::string& reason);
// The reason a peer gave, or "" while it is not broken.
std::string broken_reason(const SegmentHeader& header);

// The first failure of one communicator or plane: set once, read by every waiter.
class AbortState {
 public:
  // Returns true for the first reason (the one that stays).
  bool trip(const std::string& reason);
  bool tripped() const { return tripped_.load(std::memory_order_acquire); }
  std::string reason() const;

 private:
  std::atomic<bool> tripped_{false};
  mutable std::mutex mutex_;
  std::string reason_;
};

// How one wait reports and bounds itself.
struct WaitSpec {
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};  // named in the timeout message
  // "shm all_reduce #3 on rank 1 of 4": the prefix of every error.
  std::function<std::string()> what;
  // Whom the wait is for ("rank 2"), named when it times out.
  std::function<std::string()> waiting_for;
  // "" while the awaited peers are fine, else why not ("rank 2 (pid 77) died"). `thorough`
  // (every 100 ms) asks for the process check; otherwise only the peers' broken flags.
  std::function<std::string(bool thorough)> peer_failure;
  // Optional work to do while waiting (returns whether it did something).
  std::function<bool()> progress;
};

// Sleeps on `mine` until it is rung or `longest` passed, unless wake() is already true.
void sleep_on(Doorbell& mine, const std::function<bool()>& wake, std::chrono::nanoseconds longest);

// Returns once ready() is true; throws CommunicationError "<what>: <cause>" when `abort` trips,
// a peer fails or the deadline passes. Sleeps on `mine` (this process's doorbell) after a
// short spin.
void wait_until(Doorbell& mine, const AbortState& abort, const std::function<bool()>& ready,
                const WaitSpec& spec);

// A single-producer/single-consumer byte ring in shared memory; capacity a power of two.
struct RingHeader {
  alignas(64) std::atomic<std::uint64_t> head{0};  // bytes ever written (the producer's)
  alignas(64) std::atomic<std::uint64_t> tail{0};  // bytes ever read (the consumer's)
  alignas(64) std::uint64_t capacity = 0;
};

class Ring {
 public:
  Ring() = default;
  Ring(RingHeader* header, std::uint8_t* data) : header_(header), data_(data) {}
  // The creator sets the capacity before any peer attaches.
  static void initialise(RingHeader* header, std::uint64_t capacity);

  std::size_t readable() const;
  std::size_t writable() const;
  // Copy up to `bytes` in or out; return how many moved. Never wait.
  std::size_t write(const void* data, std::size_t bytes);
  std::size_t read(void* data, std::size_t bytes);
  // Reads exactly `bytes` when that many are readable, else nothing.
  bool read_exact(void* data, std::size_t bytes);

 private:
  RingHeader* header_ = nullptr;
  std::uint8_t* data_ = nullptr;
};

// Cross-memory attach: copies between this process and another one's memory (same user, no
// seccomp filter refusing the call). probe() says whether it works for `process`, reading
// `bytes` at `remote` and comparing with `expected`.
bool cma_probe(const ProcessId& process, std::uint64_t remote, const void* expected,
               std::size_t bytes);
// Throw CommunicationError "<what> (pid P) failed: <errno text>" (ESRCH: the peer died);
// `what` names the copy ("shm all_reduce #3 on rank 1 of 4: reading rank 2's tensor").
void cma_read(const ProcessId& process, void* local, std::uint64_t remote, std::size_t bytes,
              const std::function<std::string()>& what);
void cma_write(const ProcessId& process, const void* local, std::uint64_t remote,
               std::size_t bytes, const std::function<std::string()>& what);

}  // namespace libai::comm::shm
