// The message plane over any communicator's point-to-point transfers (runtime/comm/
// message_plane.h): the ucx communicator across hosts, a local group's threads in tests.
//
// Note [Message plane over point-to-point transfers]
// A message to a peer is a fixed-size frame on the plane's frame tag, then, on its data tag,
// the extension when the frame could not hold it, then one transfer per non-empty payload
// block. The frame says the channel, the header's size, the number of blocks and their total;
// the header and the list of block sizes ride inside the frame when they fit (a packet of a
// few tensors: a few hundred bytes), else as the extension. A payload small enough to fit
// beside them rides inside the frame too (credits, token ids, a decoding step's activations
// of a small model): one transfer per message, and send() returns at once since the frame is
// the plane's own memory. Both tags are the plane's own (callers' point-to-point tags stay
// below kFrameTag).
//
// Ordering: a sender posts a message's transfers under its peer's lock, so the transfers of
// two messages to one peer never interleave on either tag; the communicator matches each
// (peer, tag) in posting order, and the receiver takes one frame per peer at a time and posts
// that message's data receives before it takes that peer's next frame. So frame k and the
// data transfers of message k always meet, whatever the threads.
//
// The receive side is always posted: every peer has a frame receive waiting from the start,
// reposted as soon as a frame arrived (before its handler runs). The receiver knows every
// block's size from the frame, so a handler's read of a whole block goes straight into its
// memory; a read that splits a block takes it through a staging buffer.
//
// The receive thread does not poll while idle: a waiter thread per peer blocks on that peer's
// frame receive and queues the peer when it completes, so the receive thread sleeps until a
// frame is there (or a keepalive is due) and wakes within a context switch of its arrival,
// instead of within a polling period (a polling thread per process, on 2 shared cores, cost
// the pipeline more in latency than it saved in wake-ups). A waiter blocked on a receive
// that never completes ends when the communicator fails or times it out; the plane does not
// join it (it owns only shared state).
//
// A posted receive has a deadline in the communicators (their timeout), and a peer may send
// nothing for longer than that (a stage waiting for a long step elsewhere). So each rank's
// receive thread sends a keepalive frame to every peer it sent no frame to within a quarter
// of the communicator's timeout. At close each rank sends a goodbye frame to every peer and
// waits (at most 10 s) for every peer's: the goodbye is the last frame on its link, so once
// every goodbye came no receive of the plane is posted any more, and the communicator can
// close without waiting for one. A peer that never says goodbye (it died, the job failed)
// leaves a frame receive posted: the communicator then waits for it until it fails.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/message_plane.h"
#include "runtime/comm/p2p_frames.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::comm {
namespace {

using namespace std::chrono_literals;
using namespace p2p;

class P2pMessagePlane;

class P2pIncoming final : public IncomingMessage {
 public:
  P2pIncoming(P2pMessagePlane& plane, int from, std::uint32_t channel,
              std::vector<std::uint8_t> header, std::vector<std::uint64_t> blocks,
              std::uint64_t payload, std::vector<std::uint8_t> inline_payload)
      : plane_(plane),
        from_(from),
        channel_(channel),
        header_(std::move(header)),
        blocks_(std::move(blocks)),
        payload_(payload),
        inline_(std::move(inline_payload)) {}

  int from() const override { return from_; }
  std::uint32_t channel() const override { return channel_; }
  std::span<const std::uint8_t> header() const override { return header_; }
  std::size_t payload_bytes() const override { return std::size_t(payload_); }
  void read(void* dst, std::size_t bytes) override;
  std::uint64_t unread() const { return payload_ - consumed_; }

 private:
  P2pMessagePlane& plane_;
  int from_;
  std::uint32_t channel_;
  std::vector<std::uint8_t> header_;
  std::vector<std::uint64_t> blocks_;
  std::uint64_t payload_;
  std::uint64_t consumed_ = 0;
  std::size_t block_ = 0;  // the block being read
  std::uint64_t block_offset_ = 0;
  Tensor staging_;                    // that block, when a read split it
  std::vector<std::uint8_t> inline_;  // the whole payload, when it came inside the frame
};

class P2pMessagePlane final : public MessagePlane {
 public:
  P2pMessagePlane(std::shared_ptr<Communicator> world, std::chrono::milliseconds timeout)
      : world_(std::move(world)),
        timeout_(timeout),
        rank_(world_->rank()),
        size_(world_->size()),
        keepalive_every_(std::max<std::chrono::milliseconds>(world_->timeout() / 4, 1ms)) {
    keepalive_frame_ = control_frame(FrameKind::keepalive);
    goodbye_frame_ = control_frame(FrameKind::goodbye);
    const auto now = Clock::now();
    for (int p = 0; p < size_; ++p) {
      peers_.push_back(std::make_unique<Peer>());
      if (p == rank_) continue;
      Peer& peer = *peers_.back();
      peer.last_sent = now;
      peer.frame = Tensor::empty({std::int64_t(kFrameBytes)}, DType::u8);
      peer.waiter = std::make_shared<Waiter>();
      std::thread(wait_frames, p, peer.waiter, arrivals_).detach();
      post_frame_receive(p, peer);
    }
    thread_ = std::thread([this] { receive_loop(); });
  }

  ~P2pMessagePlane() override { close(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return world_->backend(); }

  void start(Handler handler, ErrorHandler on_error) override {
    LIBAI_CHECK(handler != nullptr, "message plane: start needs a handler");
    {
      std::lock_guard lock(mutex_);
      LIBAI_CHECK(!started_, "message plane of rank ", rank_, ": started twice");
      handler_ = std::move(handler);
      on_error_ = std::move(on_error);
      started_ = true;
    }
    changed_.notify_all();
  }

  void send(int peer, std::uint32_t channel, std::span<const std::uint8_t> header,
            std::span<const ConstBlock> payload) override {
    LIBAI_CHECK(peer >= 0 && peer < size_ && peer != rank_, "message plane of rank ", rank_,
                ": cannot send to rank ", peer, " (another rank of ", size_, " is needed)");
    LIBAI_CHECK(header.size() <= kMaxMessageHeader, "message plane: a header of ", header.size(),
                " bytes on channel ", channel, " (at most ", kMaxMessageHeader, ")");
    std::vector<ConstBlock> blocks;
    std::uint64_t total = 0;
    for (const ConstBlock& b : payload)
      if (b.bytes > 0) {
        LIBAI_CHECK(b.data != nullptr, "message plane: a payload block of ", b.bytes,
                    " bytes has no data");
        blocks.push_back(b);
        total += b.bytes;
      }
    LIBAI_CHECK(blocks.size() <= kMaxBlocks, "message plane: ", blocks.size(),
                " payload blocks in one message (at most ", kMaxBlocks, ")");
    throw_if_broken();

    FramePrefix prefix;
    prefix.kind = std::uint8_t(FrameKind::message);
    prefix.channel = channel;
    prefix.header_bytes = std::uint32_t(header.size());
    prefix.blocks = std::uint32_t(blocks.size());
    prefix.payload_bytes = total;
    const std::size_t extension_bytes = header.size() + blocks.size() * sizeof(std::uint64_t);
    prefix.inline_extension = extension_bytes <= kInlineRoom;
    prefix.inline_payload = extension_bytes + total <= kInlineRoom;
    Tensor frame = Tensor::zeros({std::int64_t(kFrameBytes)}, DType::u8);
    Tensor extension =
        prefix.inline_extension ? frame : Tensor::empty({std::int64_t(extension_bytes)}, DType::u8);
    auto* out = static_cast<std::uint8_t*>(frame.data_ptr());
    std::memcpy(out, &prefix, sizeof prefix);
    auto* ext = static_cast<std::uint8_t*>(extension.data_ptr()) +
                (prefix.inline_extension ? sizeof prefix : 0);
    if (!header.empty()) std::memcpy(ext, header.data(), header.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const std::uint64_t size = blocks[i].bytes;
      std::memcpy(ext + header.size() + i * sizeof size, &size, sizeof size);
    }
    if (prefix.inline_payload) {
      std::uint8_t* at = ext + extension_bytes;
      for (const ConstBlock& b : blocks) {
        std::memcpy(at, b.data, b.bytes);
        at += b.bytes;
      }
    }

    const auto what = [&] {
      return str_cat("message plane: send of ", total, " bytes on channel ", channel, " from rank ",
                     rank_, " to rank ", peer);
    };
    std::vector<WorkHandle> transfers;
    Peer& to = *peers_[std::size_t(peer)];
    try {
      std::lock_guard lock(to.mutex);
      LIBAI_CHECK_KIND(CommunicationError, !to.closed, what(), ": the plane is closed");
      reap(to);
      to.unreaped.push_back(world_->send_async(frame, peer, kFrameTag));
      if (!prefix.inline_extension)
        to.unreaped.push_back(world_->send_async(extension, peer, kDataTag));
      if (!prefix.inline_payload)
        for (const ConstBlock& b : blocks)
          transfers.push_back(world_->send_async(bytes_view(b.data, b.bytes), peer, kDataTag));
      to.last_sent = Clock::now();
    } catch (const std::exception& e) {
      fail(str_cat(what(), ": ", e.what()));
      throw_if_broken();
    }
    // The frame and the extension are the plane's own; the blocks are the caller's until
    // their bytes left.
    const auto deadline = Clock::now() + timeout_;
    try {
      for (const WorkHandle& t : transfers) await(t, deadline, what);
    } catch (...) {
      settle(transfers);
      throw;
    }
  }

  // Note [Blocks in flight]
  // A send that fails (the plane broke, its deadline passed) must not return while the world
  // still reads the caller's blocks: the caller frees them as soon as send returns. The local
  // and shm communicators copy a send's bytes on their own thread, so the transfer ends
  // within moments of the failure: ThreadSanitizer saw the local communicator's worker copy a
  // 64 MiB block that a test had freed after an abort, before a failed send waited here. A
  // ucx send whose peer takes nothing cannot be cancelled (UCX 1.13 cancels receives only)
  // and ends only when the world shuts down; it is waited for up to kSettleBound and then
  // logged as still in flight (left for later: closing the endpoints on abort).
  static constexpr std::chrono::milliseconds kSettleBound{500};
  void settle(const std::vector<WorkHandle>& transfers) {
    const auto deadline = Clock::now() + std::min(kSettleBound, world_->timeout());
    std::size_t pending = 0;
    for (const WorkHandle& t : transfers) {
      Backoff backoff;
      while (!t->completed() && Clock::now() < deadline) backoff.idle();
      pending += t->completed() ? 0 : 1;
    }
    if (pending > 0)
      logger("comm")->warn(
          "message plane of rank {}: a failed send returns with {} transfer(s) of its payload "
          "still in flight on the {} world",
          rank_, pending, world_->backend());
  }

  void abort(const std::string& reason) override { break_plane(reason, /*tell=*/false); }

  bool broken() const override { return broken_.load(); }

  // For P2pIncoming::read: a receive of exactly `bytes` from `from` into `dst`.
  void receive_block(int from, void* dst, std::size_t bytes, std::uint32_t channel) {
    throw_if_broken();
    const auto what = [&] {
      return str_cat("message plane: receive of ", bytes, " bytes on channel ", channel,
                     " from rank ", from, " on rank ", rank_);
    };
    WorkHandle w;
    try {
      w = world_->recv_async(bytes_view(dst, bytes), from, kDataTag);
    } catch (const std::exception& e) {
      fail(str_cat(what(), ": ", e.what()));
      throw_if_broken();
    }
    await(w, Clock::now() + timeout_, what);
  }

 private:
  struct Peer {
    std::mutex mutex;  // sending side: the order of this peer's transfers
    bool closed = false;
    Clock::time_point last_sent;
    std::vector<WorkHandle> unreaped;  // frames and extensions the plane owns, in flight
    // Receiving side (the receive thread only).
    Tensor frame;
    WorkHandle frame_receive;
    std::shared_ptr<Waiter> waiter;
    bool said_goodbye = false;
  };

  void post_frame_receive(int p, Peer& peer) {
    peer.frame_receive = world_->recv_async(peer.frame, p, kFrameTag);
    {
      std::lock_guard lock(peer.waiter->mutex);
      peer.waiter->next = peer.frame_receive;
    }
    peer.waiter->changed.notify_one();
  }

  void stop_waiter(Peer& peer) {
    if (!peer.waiter) return;
    {
      std::lock_guard lock(peer.waiter->mutex);
      peer.waiter->stop = true;
    }
    peer.waiter->changed.notify_one();
  }

  void wake_receive_thread() {
    {
      std::lock_guard lock(arrivals_->mutex);
      arrivals_->wake = true;
    }
    arrivals_->changed.notify_all();
  }

  static Tensor control_frame(FrameKind kind) {
    Tensor frame = Tensor::zeros({std::int64_t(kFrameBytes)}, DType::u8);
    FramePrefix prefix;
    prefix.kind = std::uint8_t(kind);
    prefix.inline_extension = 1;
    std::memcpy(frame.data_ptr(), &prefix, sizeof prefix);
    return frame;
  }

  // Drops the plane's own transfers that completed; rethrows a failed one. Under peer.mutex.
  static void reap(Peer& peer) {
    std::erase_if(peer.unreaped, [](const WorkHandle& w) {
      if (!w->completed()) return false;
      w->wait();  // rethrows its error
      return true;
    });
  }

  template <typename What>
  void await(const WorkHandle& work, Clock::time_point deadline, const What& what) {
    Backoff backoff;
    while (!work->completed()) {
      throw_if_broken();
      if (Clock::now() > deadline) {
        fail(str_cat(what(), ": timed out after ", timeout_.count(), " ms"));
        throw_if_broken();
      }
      backoff.idle();
    }
    try {
      work->wait();
    } catch (const std::exception& e) {
      fail(str_cat(what(), ": ", e.what()));
      throw_if_broken();
    }
  }

  void throw_if_broken() const {
    if (!broken_.load()) return;
    std::lock_guard lock(mutex_);
    throw CommunicationError(failure_);
  }

  // A failure the plane found: it breaks the plane and on_error hears of it (once).
  void fail(const std::string& reason) { break_plane(reason, /*tell=*/true); }

  void break_plane(const std::string& reason, bool tell) {
    ErrorHandler on_error;
    {
      std::lock_guard lock(mutex_);
      if (broken_.load()) return;
      failure_ = reason;
      broken_.store(true);
      if (tell && !closing_ && !told_) {
        told_ = true;
        on_error = on_error_;
      }
    }
    changed_.notify_all();
    wake_receive_thread();
    if (on_error) on_error(reason);
  }

  // A keepalive, or (`last`) the goodbye: no frame follows it on this link.
  void send_control(int p, const Tensor& frame, bool last = false) {
    Peer& peer = *peers_[std::size_t(p)];
    std::lock_guard lock(peer.mutex);
    if (peer.closed) return;
    peer.closed = last;
    reap(peer);
    peer.unreaped.push_back(world_->send_async(frame, p, kFrameTag));
    peer.last_sent = Clock::now();
  }

  void send_keepalives() {
    const auto now = Clock::now();
    if (now < next_keepalive_) return;
    auto next = now + keepalive_every_;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      Peer& peer = *peers_[std::size_t(p)];
      Clock::time_point last;
      {
        std::lock_guard lock(peer.mutex);
        last = peer.last_sent;
      }
      if (now - last >= keepalive_every_)
        send_control(p, keepalive_frame_);
      else
        next = std::min(next, last + keepalive_every_);
    }
    next_keepalive_ = next;
  }

  void receive_loop() {
    while (!stopping_.load() && !broken_.load()) {
      try {
        send_keepalives();
      } catch (const std::exception& e) {
        fail(str_cat("message plane of rank ", rank_, ": a keepalive failed: ", e.what()));
        break;
      }
      if (!started_.load()) {
        std::unique_lock lock(mutex_);
        changed_.wait_until(lock, std::min(next_keepalive_, Clock::now() + 100ms),
                            [&] { return started_.load() || stopping_.load() || broken_.load(); });
        continue;
      }
      int p = -1;
      {
        std::unique_lock lock(arrivals_->mutex);
        arrivals_->changed.wait_until(lock, next_keepalive_,
                                      [&] { return !arrivals_->ready.empty() || arrivals_->wake; });
        if (arrivals_->ready.empty()) continue;
        p = arrivals_->ready.front();
        arrivals_->ready.pop_front();
      }
      Peer& peer = *peers_[std::size_t(p)];
      if (!peer.said_goodbye && peer.frame_receive->completed()) take_frame(p, peer);
    }
    for (auto& peer : peers_) stop_waiter(*peer);
  }

  void take_frame(int p, Peer& peer) {
    try {
      peer.frame_receive->wait();
    } catch (const std::exception& e) {
      fail(str_cat("message plane of rank ", rank_, ": the link from rank ", p,
                   " failed: ", message_of(e)));
      return;
    }
    FramePrefix prefix;
    const auto* in = static_cast<const std::uint8_t*>(peer.frame.data_ptr());
    std::memcpy(&prefix, in, sizeof prefix);
    const auto malformed = [&](const std::string& why) {
      fail(
          str_cat("message plane of rank ", rank_, ": a malformed frame from rank ", p, ": ", why));
    };
    if (prefix.magic != kMagic) return malformed(str_cat("magic ", prefix.magic));
    const auto kind = FrameKind(prefix.kind);
    if (kind == FrameKind::goodbye) {
      stop_waiter(peer);
      {
        std::lock_guard lock(mutex_);
        peer.said_goodbye = true;
        ++goodbyes_;
      }
      changed_.notify_all();
      return;
    }
    if (kind != FrameKind::keepalive && kind != FrameKind::message)
      return malformed(str_cat("kind ", int(prefix.kind)));
    if (kind == FrameKind::message) {
      if (prefix.header_bytes > kMaxMessageHeader)
        return malformed(str_cat("a header of ", prefix.header_bytes, " bytes"));
      if (prefix.blocks > kMaxBlocks) return malformed(str_cat(prefix.blocks, " blocks"));
      const std::size_t extension_bytes =
          prefix.header_bytes + std::size_t(prefix.blocks) * sizeof(std::uint64_t);
      if (prefix.inline_extension && extension_bytes > kInlineRoom)
        return malformed(str_cat("an inline extension of ", extension_bytes, " bytes"));
      if (prefix.inline_payload &&
          (!prefix.inline_extension || prefix.payload_bytes > kInlineRoom - extension_bytes))
        return malformed(str_cat("an inline payload of ", prefix.payload_bytes, " bytes"));
      std::vector<std::uint8_t> extension(extension_bytes);
      std::vector<std::uint8_t> inline_payload;
      if (prefix.inline_extension) {
        std::memcpy(extension.data(), in + sizeof prefix, extension_bytes);
        if (prefix.inline_payload)
          inline_payload.assign(in + sizeof prefix + extension_bytes,
                                in + sizeof prefix + extension_bytes + prefix.payload_bytes);
      } else {
        try {
          receive_block(p, extension.data(), extension_bytes, prefix.channel);
        } catch (const std::exception&) {
          return;  // the plane is broken and on_error told
        }
      }
      repost(p, peer);
      std::vector<std::uint8_t> header(extension.begin(),
                                       extension.begin() + std::ptrdiff_t(prefix.header_bytes));
      std::vector<std::uint64_t> blocks(prefix.blocks);
      std::uint64_t total = 0;
      for (std::uint32_t i = 0; i < prefix.blocks; ++i) {
        std::memcpy(&blocks[i], extension.data() + prefix.header_bytes + i * sizeof(std::uint64_t),
                    sizeof(std::uint64_t));
        if (blocks[i] == 0 || blocks[i] > prefix.payload_bytes)
          return malformed(str_cat("block ", i, " of ", blocks[i], " bytes"));
        total += blocks[i];
      }
      if (total != prefix.payload_bytes)
        return malformed(
            str_cat("blocks of ", total, " bytes in a payload of ", prefix.payload_bytes));
      P2pIncoming message(*this, p, prefix.channel, std::move(header), std::move(blocks),
                          prefix.payload_bytes, std::move(inline_payload));
      try {
        handler_(message);
      } catch (const std::exception& e) {
        fail(e.what());
        return;
      }
      if (message.unread() > 0)
        fail(str_cat("message plane of rank ", rank_, ": the handler left ", message.unread(),
                     " of ", prefix.payload_bytes, " payload bytes of a message from rank ", p,
                     " on channel ", prefix.channel, " unread"));
      return;
    }
    repost(p, peer);
  }

  void repost(int p, Peer& peer) {
    try {
      post_frame_receive(p, peer);
    } catch (const std::exception& e) {
      fail(str_cat("message plane of rank ", rank_, ": the link from rank ", p,
                   " failed: ", e.what()));
    }
  }

  void close() {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;  // what fails from here on is not the job's failure
    }
    bool said_goodbye = false;
    if (!broken_.load()) {
      try {
        for (int p = 0; p < size_; ++p)
          if (p != rank_) send_control(p, goodbye_frame_, /*last=*/true);
        said_goodbye = true;
      } catch (const std::exception&) {
      }
    }
    {
      std::unique_lock lock(mutex_);
      // A plane that never started cannot take the goodbyes: its peers' wait runs out.
      if (said_goodbye && started_)
        changed_.wait_for(lock, std::min<std::chrono::milliseconds>(timeout_, 10s),
                          [&] { return goodbyes_ == size_ - 1 || broken_.load(); });
    }
    stopping_.store(true);
    break_plane(str_cat("the message plane of rank ", rank_, " closed"), /*tell=*/false);
    changed_.notify_all();
    wake_receive_thread();
    thread_.join();
    for (auto& peer : peers_) {
      std::lock_guard lock(peer->mutex);
      peer->closed = true;
    }
  }

  friend class P2pIncoming;

  std::shared_ptr<Communicator> world_;
  const std::chrono::milliseconds timeout_;
  const int rank_, size_;
  const std::chrono::milliseconds keepalive_every_;
  Tensor keepalive_frame_, goodbye_frame_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::shared_ptr<Arrivals> arrivals_ = std::make_shared<Arrivals>();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  Handler handler_;
  ErrorHandler on_error_;
  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> broken_{false};
  std::string failure_;
  bool told_ = false;
  bool closing_ = false;
  int goodbyes_ = 0;
  Clock::time_point next_keepalive_{};  // the receive thread's
  std::thread thread_;                  // last: starts once everything above exists
};

void P2pIncoming::read(void* dst, std::size_t bytes) {
  LIBAI_CHECK_KIND(CommunicationError, bytes <= payload_ - consumed_, "message plane: a read of ",
                   bytes, " bytes passes the end of the payload of a message from rank ", from_,
                   " on channel ", channel_, " (", payload_ - consumed_, " of ", payload_,
                   " bytes left)");
  auto* out = static_cast<std::uint8_t*>(dst);
  if (!inline_.empty()) {
    if (bytes > 0) std::memcpy(out, inline_.data() + consumed_, bytes);
    consumed_ += bytes;
    return;
  }
  while (bytes > 0) {
    const std::uint64_t size = blocks_[block_];
    if (block_offset_ == 0 && bytes >= size) {
      plane_.receive_block(from_, out, std::size_t(size), channel_);  // straight into dst
      out += size;
      bytes -= std::size_t(size);
      consumed_ += size;
      ++block_;
      continue;
    }
    if (block_offset_ == 0) {
      staging_ = Tensor::empty({std::int64_t(size)}, DType::u8);
      plane_.receive_block(from_, staging_.data_ptr(), std::size_t(size), channel_);
    }
    const std::size_t n = std::size_t(std::min<std::uint64_t>(bytes, size - block_offset_));
    std::memcpy(out, static_cast<const std::uint8_t*>(staging_.data_ptr()) + block_offset_, n);
    out += n;
    bytes -= n;
    consumed_ += n;
    block_offset_ += n;
    if (block_offset_ == size) {
      block_offset_ = 0;
      ++block_;
      staging_ = Tensor();
    }
  }
}

}  // namespace

std::shared_ptr<MessagePlane> make_p2p_message_plane(std::shared_ptr<Communicator> world,
                                                     std::chrono::milliseconds timeout) {
  LIBAI_CHECK(world != nullptr, "make_p2p_message_plane: no communicator");
  LIBAI_CHECK(timeout.count() > 0, "make_p2p_message_plane: the timeout must be positive");
  return std::make_shared<P2pMessagePlane>(std::move(world), timeout);
}

}  // namespace libai::comm
