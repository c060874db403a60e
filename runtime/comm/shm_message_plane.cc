// The same-host message plane (runtime/comm/message_plane.h) over shared-memory rings.
//
// Note [Shm message plane]
// Every rank owns one segment ("/libai-<id>-plane-<rank>") holding an inbound ring of
// kPlaneRing bytes per peer (the peer writes, the owner reads) and the doorbell the owner's
// threads sleep on. A message is a Frame (channel, header and payload sizes), the header, then
// the payload blocks as the caller gave them: the sender copies each block into the ring in
// pieces of kPiece (so the receiver starts reading while the rest is written) and rings the
// receiver's doorbell; one mutex per outbound ring keeps a sender's messages whole. The
// receive thread takes one message at a time from each peer in turn and hands it to the
// handler, whose read() copies the payload straight out of the ring into the caller's memory,
// waiting for bytes still on their way: a message larger than the ring streams through it.
// Segment names and pids travel once over `world` (an all_gather), then each segment is
// unlinked after a barrier (Note [Same-host data plane] in shm_transport.h).
//
// Failures. A failure the plane found itself (a dead peer, a timeout, a handler's exception, a
// malformed message) trips the plane, tells on_error once and marks the rank's segment broken
// with the reason, so a peer whose send or read waits on this rank fails at once with that
// first cause rather than a timeout. abort() trips the plane and wakes its own waiters but
// marks nothing: its caller (the control plane) tells every node itself, and a peer blocked on
// an aborted rank is blocked on a rank that is alive and does not drain, which its own abort()
// or timeout ends (message_plane.h). A dead peer fails the waits on it within ~100 ms; the
// idle receive thread waits without a deadline (no message due is not an error) but checks
// its peers' processes every kLiveness, so a death is on_error's within about that even when
// nothing is in flight. A rank that closed its plane says so in its segment first: once it
// exits, its peers see a peer that left, not one that died.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/comm/communicator.h"
#include "runtime/comm/message_plane.h"
#include "runtime/comm/shm_transport.h"
#include "runtime/error.h"

namespace libai::comm {
namespace {

using shm::Clock;

constexpr std::size_t kPlaneRing = 8u << 20;
constexpr std::size_t kPiece = 256u << 10;
constexpr std::uint64_t kMagic = 0x6c69626169706c32ull;  // "libaipl2"
constexpr auto kLiveness = std::chrono::milliseconds(100);

// The start of every plane segment: the common header, then whether its owner closed the
// plane (after which its process may exit without being a failure).
struct PlaneHeader {
  shm::SegmentHeader common;
  std::atomic<std::uint32_t> closed{0};
};

struct Frame {
  std::uint32_t channel = 0, header_bytes = 0;
  std::uint64_t payload_bytes = 0;
};

// What every rank tells the others through `world`.
struct Identity {
  char name[64] = {};
  shm::ProcessId process;
};

class ShmMessagePlane;

class ShmIncoming final : public IncomingMessage {
 public:
  ShmIncoming(ShmMessagePlane& plane, int from, const Frame& frame)
      : plane_(plane), from_(from), frame_(frame) {}
  int from() const override { return from_; }
  std::uint32_t channel() const override { return frame_.channel; }
  std::span<const std::uint8_t> header() const override { return header_; }
  std::size_t payload_bytes() const override { return std::size_t(frame_.payload_bytes); }
  void read(void* dst, std::size_t bytes) override;
  std::size_t unread() const { return std::size_t(frame_.payload_bytes) - read_; }

  std::vector<std::uint8_t> header_;

 private:
  ShmMessagePlane& plane_;
  int from_;
  Frame frame_;
  std::size_t read_ = 0;
};

class ShmMessagePlane final : public MessagePlane {
 public:
  ShmMessagePlane(Communicator& world, std::chrono::milliseconds timeout)
      : rank_(world.rank()), size_(world.size()), timeout_(timeout) {
    LIBAI_CHECK(timeout.count() > 0, "shm message plane: the timeout must be positive");
    ring_stride_ = round_up(sizeof(shm::RingHeader)) + kPlaneRing;
    bytes_ = rings_offset() + std::size_t(size_) * ring_stride_;
    Identity mine;
    const std::string name = shm::segment_name(shm::random_job_id(), "plane", rank_);
    std::snprintf(mine.name, sizeof mine.name, "%s", name.c_str());
    mine.process = shm::this_process();
    own_ = shm::Segment::create(name, bytes_);
    auto* header = &(new (own_.data()) PlaneHeader)->common;
    header->rank = rank_;
    header->size = size_;
    header->owner = mine.process;
    for (int q = 0; q < size_; ++q) {
      shm::Ring::initialise(new (ring_at(own_.data(), q)) shm::RingHeader, kPlaneRing);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    header->magic = kMagic;

    Tensor out = Tensor::empty({std::int64_t(sizeof mine)}, DType::u8);
    std::memcpy(out.data_ptr(), &mine, sizeof mine);
    Tensor all = Tensor::empty({std::int64_t(sizeof mine) * size_}, DType::u8);
    world.all_gather(out, all);
    peers_.resize(std::size_t(size_));
    segments_.resize(std::size_t(size_));
    for (int q = 0; q < size_; ++q) {
      Identity theirs;
      std::memcpy(&theirs, static_cast<const std::uint8_t*>(all.data_ptr()) + q * sizeof theirs,
                  sizeof theirs);
      peers_[std::size_t(q)] = theirs.process;
      if (q == rank_) continue;
      theirs.name[sizeof theirs.name - 1] = '\0';
      segments_[std::size_t(q)] = shm::Segment::open(theirs.name, bytes_);
      const auto& h = header_of(q);
      LIBAI_CHECK_KIND(CommunicationError, h.magic == kMagic && h.rank == q && h.size == size_,
                       "shm message plane on rank ", rank_, ": segment ", theirs.name,
                       " is not rank ", q, "'s plane");
    }
    world.barrier();  // every rank has attached every segment: the names can go
    own_.unlink();
    send_mutexes_ = std::vector<std::mutex>(std::size_t(size_));
  }

  ~ShmMessagePlane() override {
    closing_.store(true);  // what fails from here on is not the job's failure
    plane_header(rank_).closed.store(1, std::memory_order_release);
    for (int q = 0; q < size_; ++q) shm::ring_doorbell(header_of(q).doorbell);
    stopping_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return "shm"; }
  bool broken() const override { return abort_.tripped(); }

  void start(Handler handler, ErrorHandler on_error) override {
    LIBAI_CHECK(!thread_.joinable(), "shm message plane: start() called twice");
    {
      std::lock_guard lock(telling_);
      on_error_ = std::move(on_error);
    }
    thread_ = std::thread([this, handler = std::move(handler)] { receive(handler); });
  }

  void send(int peer, std::uint32_t channel, std::span<const std::uint8_t> header,
            std::span<const ConstBlock> payload) override {
    LIBAI_CHECK(peer >= 0 && peer < size_ && peer != rank_, "shm message plane: peer ", peer,
                " is not another rank of ", size_);
    LIBAI_CHECK(header.size() <= kMaxMessageHeader, "shm message plane: a header of ",
                header.size(), " bytes is over the limit of ", kMaxMessageHeader);
    if (abort_.tripped()) throw CommunicationError(abort_.reason());
    Frame frame{channel, std::uint32_t(header.size()), 0};
    for (const ConstBlock& block : payload) frame.payload_bytes += block.bytes;
    std::lock_guard lock(send_mutexes_[std::size_t(peer)]);
    try {
      write(peer, &frame, sizeof frame);
      write(peer, header.data(), header.size());
      for (const ConstBlock& block : payload) write(peer, block.data, block.bytes);
    } catch (const CommunicationError& e) {
      fail(e.what());  // a no-op when the wait ended because the plane was already broken
      throw;
    }
  }

  void abort(const std::string& reason) override {
    if (abort_.trip(reason)) shm::ring_doorbell(header_of(rank_).doorbell);  // wakes our waiters
    await_telling();
  }

  // Copies `bytes` out of the ring from `from`, waiting for them (the handler's read()).
  void read_from(int from, void* dst, std::size_t bytes) {
    auto* to = static_cast<std::uint8_t*>(dst);
    shm::Ring ring = inbound(from);
    while (bytes > 0) {
      if (ring.readable() == 0) {
        wait(
            from, [&] { return ring.readable() > 0; }, "reading a message from");
      }
      const std::size_t n = ring.read(to, std::min(bytes, kPiece));
      to += n;
      bytes -= n;
      shm::ring_doorbell(header_of(from).doorbell);  // the sender may wait for space
    }
  }

 private:
  static std::size_t round_up(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }
  static std::size_t rings_offset() { return round_up(sizeof(PlaneHeader)); }
  std::uint8_t* ring_at(std::uint8_t* base, int from) const {
    return base + rings_offset() + std::size_t(from) * ring_stride_;
  }
  std::uint8_t* base(int q) const {
    return q == rank_ ? own_.data() : segments_[std::size_t(q)].data();
  }
  PlaneHeader& plane_header(int q) const { return *reinterpret_cast<PlaneHeader*>(base(q)); }
  shm::SegmentHeader& header_of(int q) const { return plane_header(q).common; }
  shm::Ring ring_in(std::uint8_t* segment, int from) const {
    std::uint8_t* at = ring_at(segment, from);
    return shm::Ring(reinterpret_cast<shm::RingHeader*>(at),
                     at + round_up(sizeof(shm::RingHeader)));
  }
  shm::Ring inbound(int from) const { return ring_in(own_.data(), from); }
  shm::Ring outbound(int to) const { return ring_in(base(to), rank_); }

  // Waits on our doorbell for ready(), failing on abort, on `peer`'s death or failure, or
  // after the timeout without progress.
  void wait(int peer, const std::function<bool()>& ready, const char* doing) {
    shm::WaitSpec spec;
    spec.deadline = Clock::now() + timeout_;
    spec.timeout = timeout_;
    spec.what = [&] {
      return str_cat("shm message plane on rank ", rank_, ": ", doing, " rank ", peer);
    };
    spec.waiting_for = [&] { return str_cat("rank ", peer); };
    spec.peer_failure = [&](bool thorough) -> std::string {
      if (std::string reason = shm::broken_reason(header_of(peer)); !reason.empty())
        return str_cat("rank ", peer, " failed: ", reason);
      if (plane_header(peer).closed.load(std::memory_order_acquire))
        return str_cat("rank ", peer, " closed its message plane");
      if (thorough && !shm::process_alive(peers_[std::size_t(peer)])) return died(peer);
      return "";
    };
    shm::wait_until(header_of(rank_).doorbell, abort_, ready, spec);
  }

  std::string died(int peer) const {
    return str_cat("rank ", peer, " (pid ", peers_[std::size_t(peer)].pid, ") died");
  }

  // A failure the plane found: the first one breaks the plane, marks this rank's segment for
  // the peers that wait on it, and is on_error's (once, and not while the plane closes).
  void fail(const std::string& reason) {
    if (!abort_.trip(reason)) return;
    shm::mark_broken(header_of(rank_), reason);  // rings our doorbell: our waiters wake
    if (closing_.load()) return;
    std::lock_guard lock(telling_);
    if (!on_error_) return;
    teller_.store(std::this_thread::get_id());
    try {
      on_error_(reason);
    } catch (...) {
      // on_error must not throw; the plane is broken either way
    }
    teller_.store(std::thread::id());
  }

  // Returns once no on_error call is in progress on another thread: after abort() or the
  // destructor returns, the plane calls nothing of its owner's (whose on_error may capture
  // locals that are about to go). on_error itself may call abort().
  void await_telling() {
    if (teller_.load() == std::this_thread::get_id()) return;
    std::lock_guard lock(telling_);
  }

  void write(int peer, const void* data, std::size_t bytes) {
    const auto* from = static_cast<const std::uint8_t*>(data);
    shm::Ring ring = outbound(peer);
    while (bytes > 0) {
      if (ring.writable() == 0) {
        wait(
            peer, [&] { return ring.writable() > 0; }, "sending a message to");
      }
      const std::size_t n = ring.write(from, std::min(bytes, kPiece));
      from += n;
      bytes -= n;
      shm::ring_doorbell(header_of(peer).doorbell);
    }
  }

  void receive(const Handler& handler) {
    try {
      auto next_liveness = Clock::now() + kLiveness;
      for (int next = 0;;) {
        if (abort_.tripped()) return;  // the failure is known: on_error heard, or abort's caller
        int from = -1;
        for (int k = 0; k < size_ && from < 0; ++k) {
          const int q = (next + k) % size_;
          if (q != rank_ && inbound(q).readable() >= sizeof(Frame)) from = q;
        }
        if (from < 0) {
          if (stopping_.load()) return;
          if (Clock::now() >= next_liveness) {
            check_peers_alive();
            next_liveness = Clock::now() + kLiveness;
          }
          idle_wait();
          continue;
        }
        next = from + 1;  // every peer in turn
        Frame frame;
        inbound(from).read(&frame, sizeof frame);
        shm::ring_doorbell(header_of(from).doorbell);
        ShmIncoming message(*this, from, frame);
        message.header_.resize(frame.header_bytes);
        read_from(from, message.header_.data(), frame.header_bytes);
        try {
          handler(message);
        } catch (const CommunicationError&) {
          throw;
        } catch (const std::exception& e) {
          throw CommunicationError(str_cat("shm message plane on rank ", rank_,
                                           ": the handler of a message from rank ", from,
                                           " (channel ", frame.channel, ") threw: ", e.what()));
        }
        LIBAI_CHECK_KIND(CommunicationError, message.unread() == 0, "shm message plane on rank ",
                         rank_, ": the handler of a message from rank ", from, " (channel ",
                         frame.channel, ") left ", message.unread(), " of its ",
                         frame.payload_bytes, " payload bytes unread");
      }
    } catch (const std::exception& e) {
      fail(e.what());  // a no-op when the wait failed because the plane was aborted
    }
  }

  // An idle receive thread still owes on_error a peer's death: a rank that died between
  // messages would otherwise go unnoticed until this rank sends to it. A peer that closed its
  // plane may exit.
  void check_peers_alive() {
    for (int q = 0; q < size_; ++q) {
      if (q == rank_ || plane_header(q).closed.load(std::memory_order_acquire)) continue;
      if (!shm::process_alive(peers_[std::size_t(q)]))
        throw CommunicationError(str_cat("shm message plane on rank ", rank_, ": ", died(q)));
    }
  }

  void idle_wait() {
    for (int spin = 0; spin < 64; ++spin) {  // the next message is often microseconds away
      if (any_inbound()) return;
      std::this_thread::yield();
    }
    shm::sleep_on(
        header_of(rank_).doorbell,
        [&] { return any_inbound() || abort_.tripped() || stopping_.load(); }, kLiveness);
  }

  bool any_inbound() const {
    for (int q = 0; q < size_; ++q) {
      if (q != rank_ && inbound(q).readable() >= sizeof(Frame)) return true;
    }
    return false;
  }

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::size_t ring_stride_ = 0, bytes_ = 0;
  shm::Segment own_;
  std::vector<shm::Segment> segments_;
  std::vector<shm::ProcessId> peers_;
  std::vector<std::mutex> send_mutexes_;
  shm::AbortState abort_;
  std::atomic<bool> stopping_{false}, closing_{false};
  std::mutex telling_;  // held while on_error runs
  ErrorHandler on_error_;
  std::atomic<std::thread::id> teller_;
  std::thread thread_;
};

void ShmIncoming::read(void* dst, std::size_t bytes) {
  LIBAI_CHECK_KIND(CommunicationError, bytes <= unread(), "shm message plane: reading ", bytes,
                   " bytes of a message from rank ", from_, " (channel ", frame_.channel, ") with ",
                   unread(), " of its ", frame_.payload_bytes, " payload bytes left");
  plane_.read_from(from_, dst, bytes);
  read_ += bytes;
}

}  // namespace

std::shared_ptr<MessagePlane> make_shm_message_plane(Communicator& world,
                                                     std::chrono::milliseconds timeout) {
  return std::make_shared<ShmMessagePlane>(world, timeout);
}

}  // namespace libai::comm
