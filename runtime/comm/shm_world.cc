#include "runtime/comm/shm_world.h"

#include <algorithm>
#include <cstring>

#include "runtime/comm/process_group_checks.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/error.h"

namespace libai::comm::shm {
namespace {

constexpr std::uint64_t kMagic = 0x6c69626169736d31ull;  // "libaism1"
constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

template <typename T>
Blob blob_of(const T& value) {
  Blob out(sizeof value);
  std::memcpy(out.data(), &value, sizeof value);
  return out;
}

template <typename T>
T value_of(const Blob& blob, const std::string& what) {
  LIBAI_CHECK_KIND(CommunicationError, blob.size() == sizeof(T), what, ": a peer sent ",
                   blob.size(), " bytes, expected ", sizeof(T));
  T value;
  std::memcpy(&value, blob.data(), sizeof value);
  return value;
}

// What each rank tells the others once its segment exists.
struct Attachment {
  ProcessId process;
  std::uint64_t probe_address = 0;
  std::uint64_t probe_value = 0;
};

}  // namespace

ShmWorld::ShmWorld(const ShmGroupOptions& options)
    : rank_(options.rank), size_(options.size), timeout_(options.timeout) {
  const std::string where = str_cat("shm communicator, rank ", rank_, " of ", size_);
  Rendezvous store(detail::rendezvous_options(options));
  // Round 1: rank 0 names the job, so that every segment name is unique to it.
  const std::string mine_job = rank_ == 0 ? random_job_id() : "";
  const std::vector<Blob> jobs = store.exchange(Blob(mine_job.begin(), mine_job.end()));
  const std::string job(jobs[0].begin(), jobs[0].end());
  LIBAI_CHECK_KIND(CommunicationError, job.size() == 16, where, ": rank 0 sent no job id");

  slots_offset_ = round_up(sizeof(SegmentHeader));
  staging_offset_ = slots_offset_ + round_up(kMaxGroups * sizeof(GroupSlot));
  rings_offset_ = staging_offset_ + 2 * kStagingHalf;
  ring_stride_ = round_up(sizeof(RingHeader)) + kPointToPointRing;
  const std::size_t bytes = rings_offset_ + std::size_t(size_) * ring_stride_;

  // Round 2: create ours, then learn every rank's process and CMA probe word.
  own_ = Segment::create(segment_name(job, "comm", rank_), bytes);
  auto* own_header = new (own_.data()) SegmentHeader;
  own_header->rank = rank_;
  own_header->size = size_;
  own_header->owner = this_process();
  for (std::uint32_t g = 0; g < kMaxGroups; ++g)
    new (own_.data() + slots_offset_ + g * sizeof(GroupSlot)) GroupSlot;
  for (int q = 0; q < size_; ++q) {
    auto* ring = new (own_.data() + rings_offset_ + std::size_t(q) * ring_stride_) RingHeader;
    Ring::initialise(ring, kPointToPointRing);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  own_header->magic = kMagic;
  const auto probe = std::make_unique<std::uint64_t>(0);
  const std::string random = random_job_id();
  std::memcpy(probe.get(), random.data(), sizeof *probe);
  Attachment mine{own_header->owner, reinterpret_cast<std::uint64_t>(probe.get()), *probe};
  const std::vector<Blob> attachments = store.exchange(blob_of(mine));

  // Map every peer's segment and check who owns it; probe CMA with each peer.
  peer_segments_.resize(std::size_t(size_));
  peers_.resize(std::size_t(size_));
  bool cma_ok = options.cross_memory_attach;
  for (int q = 0; q < size_; ++q) {
    const auto theirs = value_of<Attachment>(attachments[std::size_t(q)], where);
    peers_[std::size_t(q)] = theirs.process;
    if (q == rank_) continue;
    peer_segments_[std::size_t(q)] = Segment::open(segment_name(job, "comm", q), bytes);
    const SegmentHeader& h = header(q);
    LIBAI_CHECK_KIND(CommunicationError,
                     h.magic == kMagic && h.rank == q && h.size == size_ &&
                         h.owner.pid == theirs.process.pid,
                     where, ": the segment of rank ", q, " is not rank ", q, "'s of this job");
    if (cma_ok) {
      cma_ok = cma_probe(theirs.process, theirs.probe_address, &theirs.probe_value,
                         sizeof theirs.probe_value);
    }
  }
  // Round 3: everyone has attached, so the names can go: nothing is left in /dev/shm even if
  // the job is killed from here on. CMA only if every rank could use it with every peer.
  const std::vector<Blob> verdicts = store.exchange(blob_of(std::uint8_t(cma_ok)));
  own_.unlink();
  cma_ = true;
  for (const Blob& verdict : verdicts) cma_ = cma_ && value_of<std::uint8_t>(verdict, where) != 0;

  sends_.resize(std::size_t(size_));
  inbound_.resize(std::size_t(size_));
  thread_ = std::thread([this] { main(); });
}

ShmWorld::~ShmWorld() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ring_doorbell(header(rank_).doorbell);
  thread_.join();
}

std::uint8_t* ShmWorld::base(int world_rank) const {
  return world_rank == rank_ ? own_.data() : peer_segments_[std::size_t(world_rank)].data();
}

SegmentHeader& ShmWorld::header(int world_rank) const {
  return *reinterpret_cast<SegmentHeader*>(base(world_rank));
}

GroupSlot& ShmWorld::slot(int world_rank, std::uint32_t group) {
  return *reinterpret_cast<GroupSlot*>(base(world_rank) + slots_offset_ +
                                       group * sizeof(GroupSlot));
}

std::uint8_t* ShmWorld::staging(int world_rank, int half) {
  return base(world_rank) + staging_offset_ + std::size_t(half) * kStagingHalf;
}

Ring ShmWorld::inbound_ring(int from) const {
  std::uint8_t* at = own_.data() + rings_offset_ + std::size_t(from) * ring_stride_;
  return Ring(reinterpret_cast<RingHeader*>(at), at + round_up(sizeof(RingHeader)));
}

Ring ShmWorld::outbound_ring(int to) const {
  std::uint8_t* at = base(to) + rings_offset_ + std::size_t(rank_) * ring_stride_;
  return Ring(reinterpret_cast<RingHeader*>(at), at + round_up(sizeof(RingHeader)));
}

std::string ShmWorld::peer_failure(const std::vector<int>& world_ranks, bool thorough) const {
  for (int q : world_ranks) {
    if (q == rank_) continue;
    if (std::string reason = broken_reason(header(q)); !reason.empty())
      return str_cat("rank ", q, " failed: ", reason);
    if (thorough && !process_alive(peers_[std::size_t(q)]))
      return str_cat("rank ", q, " (pid ", peers_[std::size_t(q)].pid, ") died");
  }
  return "";
}

void ShmWorld::throw_if_broken() const {
  if (abort_.tripped()) throw CommunicationError(abort_.reason());
}

void ShmWorld::submit(Task task) {
  throw_if_broken();
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  ring_doorbell(header(rank_).doorbell);
}

void ShmWorld::abort(const std::string& reason) {
  if (!abort_.trip(reason)) return;
  mark_broken(header(rank_), reason);  // rings our own doorbell: our waiters wake
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) ring_doorbell(header(q).doorbell);  // peers waiting on us see the flag
  }
}

void ShmWorld::barrier(GroupView& group, const std::function<std::string()>& what) {
  const std::uint64_t number = ++group.barriers;
  slot(rank_, group.id).barrier.store(number, std::memory_order_seq_cst);
  for (int q : group.world_ranks) {
    if (q != rank_) ring_doorbell(header(q).doorbell);
  }
  const auto arrived = [&](int q) {
    return slot(q, group.id).barrier.load(std::memory_order_acquire) >= number;
  };
  WaitSpec spec;
  spec.deadline = Clock::now() + timeout_;
  spec.timeout = timeout_;
  spec.what = what;
  spec.waiting_for = [&] {
    std::string missing;
    for (int q : group.world_ranks) {
      if (!arrived(q)) missing += str_cat(missing.empty() ? "rank " : ", ", q);
    }
    return missing;
  };
  spec.peer_failure = [&](bool thorough) { return peer_failure(group.world_ranks, thorough); };
  spec.progress = [this] { return progress(); };  // transfers keep moving meanwhile
  wait_until(header(rank_).doorbell, abort_,
             [&] { return std::all_of(group.world_ranks.begin(), group.world_ranks.end(), arrived); },
             spec);
}

void ShmWorld::main() {
  auto idle_since = Clock::now();
  auto next_check = idle_since;
  for (;;) {
    Task task;
    bool have = false;
    {
      std::lock_guard lock(mutex_);
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        have = true;
      } else if (stopping_ && transfers_idle()) {
        return;
      }
    }
    if (have) {
      execute(task);
      idle_since = Clock::now();
      continue;
    }
    if (abort_.tripped()) {
      fail_everything(abort_.reason());
    } else {
      try {
        if (progress()) {
          idle_since = Clock::now();
          continue;
        }
        if (Clock::now() >= next_check) {
          next_check = Clock::now() + std::chrono::milliseconds(100);
          check_transfers();
        }
      } catch (const std::exception& e) {
        abort(e.what());
        fail_everything(e.what());
      }
    }
    if (Clock::now() - idle_since < std::chrono::microseconds(50)) {
      std::this_thread::yield();
      continue;
    }
    // Nothing to do: sleep until a task, a peer's bytes or ring space, or the next check.
    sleep_on(
        header(rank_).doorbell,
        [&] {
          std::lock_guard lock(mutex_);
          return !queue_.empty() || stopping_;
        },
        std::chrono::milliseconds(100));
  }
}

void ShmWorld::execute(Task& task) {
  try {
    throw_if_broken();
    if (task.run) {
      task.run();
      task.work->finish(nullptr);
    } else {
      post(task.post);
    }
  } catch (const std::exception& e) {
    abort(e.what());
    task.work->finish(std::current_exception());
    fail_everything(abort_.reason());
  }
}

}  // namespace libai::comm::shm
