// Internal to the p2p message plane (p2p_message_plane.cc, Note [Message plane over
// point-to-point transfers]): the frame every message starts with, and the threads that wait
// for frames to arrive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/comm/communicator.h"

namespace libai::comm::p2p {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kFrameTag = 0xffffff00u;
constexpr std::uint32_t kDataTag = 0xffffff01u;
constexpr std::size_t kFrameBytes = 1024;
constexpr std::uint32_t kMagic = 0x3150'4d4cu;  // "LMP1"
constexpr std::uint32_t kMaxBlocks = 1u << 16;

enum class FrameKind : std::uint8_t { message = 1, keepalive = 2, goodbye = 3 };

// The frame's fixed part; the extension (header bytes, then one u64 size per block) follows
// it inside the frame when `inline_extension` is set.
struct FramePrefix {
  std::uint32_t magic = kMagic;
  std::uint8_t kind = 0;
  std::uint8_t inline_extension = 0;
  std::uint8_t inline_payload = 0;  // the payload follows the extension inside the frame
  std::uint8_t reserved = 0;
  std::uint32_t channel = 0;
  std::uint32_t header_bytes = 0;
  std::uint32_t blocks = 0;
  std::uint32_t reserved2 = 0;
  std::uint64_t payload_bytes = 0;
};
static_assert(sizeof(FramePrefix) == 32);
constexpr std::size_t kInlineRoom = kFrameBytes - sizeof(FramePrefix);

// How the plane's threads wait on 2 shared cores: yield for the first 100 us without progress
// (the next frame or block of a burst is usually that close), then sleep 50 us between polls,
// so an idle plane costs next to nothing while a busy one answers within a poll.
class Backoff {
 public:
  void busy() { idle_since_ = {}; }
  void idle() {
    const auto now = Clock::now();
    if (idle_since_ == Clock::time_point{}) idle_since_ = now;
    if (now - idle_since_ < std::chrono::microseconds(100))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

 private:
  Clock::time_point idle_since_{};
};

// Peers whose frame receive completed, for the receive thread (shared with the waiters).
struct Arrivals {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<int> ready;
  bool wake = false;  // the plane stops or broke
};

// One peer's waiter thread: waits for each frame receive the receive thread hands it.
struct Waiter {
  std::mutex mutex;
  std::condition_variable changed;
  WorkHandle next;
  bool stop = false;
};

// A tensor over bytes the plane does not own: it waits for (or owns) every transfer of such a
// view before the memory may go.
inline Tensor bytes_view(const void* data, std::size_t bytes) {
  return Tensor::from_blob(const_cast<void*>(data), {std::int64_t(bytes)}, DType::u8, nullptr);
}

inline std::string message_of(const std::exception& e) { return e.what(); }

// One peer's waiter thread: hands each completed frame receive to the receive thread.
void wait_frames(int peer, std::shared_ptr<Waiter> waiter, std::shared_ptr<Arrivals> arrivals);

}  // namespace libai::comm::p2p
