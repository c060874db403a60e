// The shm message plane between forked processes of this host (the world communicator that
// exchanges the segment names is the shm one). Every payload is a function of (sender, thread,
// sequence, index), so receivers check each byte without a second channel.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "runtime/comm/message_plane.h"
#include "tests/common/forked_ranks.h"

namespace libai::comm {
namespace {

using namespace forked_ranks;

std::uint32_t value(int from, int thread, int sequence, std::size_t i) {
  return std::uint32_t(from * 1000003 + thread * 10007 + sequence * 101) + std::uint32_t(i) * 7u;
}

std::vector<std::uint32_t> payload_of(int from, int thread, int sequence, std::size_t words) {
  std::vector<std::uint32_t> out(words);
  for (std::size_t i = 0; i < words; ++i) out[i] = value(from, thread, sequence, i);
  return out;
}

struct Tag {
  std::int32_t thread = 0, sequence = 0;
  std::uint64_t words = 0;
};

std::span<const std::uint8_t> bytes_of(const Tag& tag) {
  return {reinterpret_cast<const std::uint8_t*>(&tag), sizeof tag};
}

// Waits (bounded) until pred() is true.
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds bound = 20s) {
  const auto deadline = Clock::now() + bound;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Three ranks, each sending to both others from three threads at once: small messages, and one
// message of 20 MB (2.5 x the ring) per thread, in two payload blocks. Each receiver sees every
// (sender, thread) stream in order and every byte right.
TEST(ShmMessagePlane, OrderedCompleteMessagesFromSeveralThreadsAndLargerThanTheRing) {
  expect_all_ok(run_ranks(3, [](Communicator& world, int) {
    const int r = world.rank(), n = world.size();
    constexpr int kThreads = 3, kMessages = 40;
    auto plane = make_shm_message_plane(world, 20s);
    require(plane->transport() == std::string("shm") && plane->rank() == r, "identity");
    std::mutex mutex;
    std::map<std::pair<int, int>, int> next;  // (from, thread) -> next sequence
    std::string problem;
    std::atomic<int> received{0};
    plane->start(
        [&](IncomingMessage& m) {
          Tag tag;
          require(m.header().size() == sizeof tag, "header size ", m.header().size());
          std::memcpy(&tag, m.header().data(), sizeof tag);
          require(m.channel() == std::uint32_t(tag.thread) && m.payload_bytes() == tag.words * 4,
                  "channel or size");
          std::vector<std::uint32_t> got(tag.words);
          const std::size_t half = tag.words / 2 * 4;
          m.read(got.data(), half);  // in two reads of other sizes than the sender's blocks
          m.read(reinterpret_cast<std::uint8_t*>(got.data()) + half, tag.words * 4 - half);
          std::lock_guard lock(mutex);
          int& expected = next[{m.from(), tag.thread}];
          if (tag.sequence != expected && problem.empty())
            problem = str_cat("from ", m.from(), " thread ", tag.thread, ": sequence ",
                              tag.sequence, ", expected ", expected);
          expected = tag.sequence + 1;
          if (got != payload_of(m.from(), tag.thread, tag.sequence, tag.words) && problem.empty())
            problem = str_cat("from ", m.from(), " thread ", tag.thread, " message ",
                              tag.sequence, ": wrong payload");
          ++received;
        },
        [&](const std::string& error) {
          std::lock_guard lock(mutex);
          problem = "on_error: " + error;
        });
    world.barrier();
    std::vector<std::thread> senders;
    for (int thread = 0; thread < kThreads; ++thread) {
      senders.emplace_back([&, thread] {
        for (int sequence = 0; sequence < kMessages; ++sequence) {
          const std::size_t words = sequence == kMessages / 2 ? (5u << 20) : std::size_t(sequence * 37);
          const auto data = payload_of(r, thread, sequence, words);
          const std::size_t first = words / 3 * 4;
          const ConstBlock blocks[] = {{data.data(), first},
                                       {reinterpret_cast<const std::uint8_t*>(data.data()) + first,
                                        words * 4 - first}};
          const Tag tag{thread, sequence, words};
          for (int peer = 0; peer < n; ++peer)
            if (peer != r) plane->send(peer, std::uint32_t(thread), bytes_of(tag), blocks);
        }
      });
    }
    for (auto& t : senders) t.join();
    const int expected = (n - 1) * kThreads * kMessages;
    require(eventually([&] { return received.load() == expected; }), "received ",
            received.load(), " of ", expected);
    world.barrier();
    std::lock_guard lock(mutex);
    require(problem.empty(), problem);
    require(!plane->broken(), "broken");
    return std::string("ok");
  }));
}

// Rank 1 dies while rank 0's handler is reading its 64 MB message: the read, and so the
// plane, fails naming rank 1 within about a second; a send to it fails too.
TEST(ShmMessagePlane, DeadPeerFailsTheReadAndTheSendNamingIt) {
  const auto reports = run_ranks(2, [](Communicator& world, int) {
    auto plane = make_shm_message_plane(world, 30s);
    std::mutex mutex;
    std::string error;
    std::int64_t error_at = 0;
    plane->start(
        [&](IncomingMessage& m) {
          std::vector<std::uint8_t> piece(1 << 20);
          for (std::size_t left = m.payload_bytes(); left > 0;) {
            const std::size_t n = std::min(left, piece.size());
            m.read(piece.data(), n);
            left -= n;
            std::this_thread::sleep_for(10ms);  // slow: the sender dies mid-message
          }
        },
        [&](const std::string& e) {
          std::lock_guard lock(mutex);
          error = e;
          error_at = now_ns();
        });
    world.barrier();
    const std::int64_t start = now_ns();
    if (world.rank() == 1) {
      std::vector<std::uint8_t> big(64u << 20, 1);
      std::thread killer([] {
        std::this_thread::sleep_for(100ms);
        ::raise(SIGKILL);
      });
      const ConstBlock block{big.data(), big.size()};
      plane->send(0, 1, {}, {&block, 1});  // ends in the middle, when the process is killed
      killer.join();
      return std::string("FAILED: survived");
    }
    require(eventually([&] {
              std::lock_guard lock(mutex);
              return !error.empty();
            }),
            "no error");
    std::string send_error;
    std::vector<std::uint8_t> big(32u << 20, 2);
    const ConstBlock block{big.data(), big.size()};
    try {
      plane->send(1, 2, {}, {&block, 1});
    } catch (const CommunicationError& e) {
      send_error = e.what();
    }
    std::lock_guard lock(mutex);
    require(error.find("rank 1 (pid") != std::string::npos && error.find("died") != std::string::npos,
            "on_error: ", error);
    require(error_at - start < 2'000'000'000, "the death was noticed after ",
            (error_at - start) / 1000000, " ms (killed at 100 ms)");
    require(!send_error.empty(), "the send to the dead peer did not throw");
    require(plane->broken(), "not broken");
    return std::string("ok");
  });
  EXPECT_EQ(reports[0], "ok");
}

// A send blocked on a full ring (the peer never starts its receive thread) ends the moment
// another thread calls abort(); later sends throw the reason too.
TEST(ShmMessagePlane, AbortWakesABlockedSend) {
  expect_all_ok(run_ranks(2, [](Communicator& world, int) {
    auto plane = make_shm_message_plane(world, 30s);
    if (world.rank() == 1) {  // receives nothing until rank 0 is done
      world.barrier();
      return std::string("ok");
    }
    std::vector<std::uint8_t> big(32u << 20, 3);
    const ConstBlock block{big.data(), big.size()};
    require_abort_wakes([&] { plane->send(1, 0, {}, {&block, 1}); },
                        [&](const std::string& reason) { plane->abort(reason); },
                        "control plane: node 1 hangs", 200ms);
    bool later = false;
    try {
      plane->send(1, 0, {}, {});
    } catch (const CommunicationError&) {
      later = true;
    }
    require(later, "a send after abort did not throw");
    world.barrier();
    return std::string("ok");
  }));
}

// A handler that throws, or leaves payload unread, breaks the plane; on_error is told once.
TEST(ShmMessagePlane, HandlerErrorsBreakThePlaneOnce) {
  for (const bool throws : {true, false}) {
    expect_all_ok(run_ranks(2, [throws](Communicator& world, int) {
      auto plane = make_shm_message_plane(world, 10s);
      std::mutex mutex;
      std::vector<std::string> errors;
      plane->start(
          [&](IncomingMessage& m) {
            if (throws) throw std::runtime_error("bad header on channel " + std::to_string(m.channel()));
            std::uint8_t first[4];
            m.read(first, sizeof first);  // and leaves the rest
          },
          [&](const std::string& e) {
            std::lock_guard lock(mutex);
            errors.push_back(e);
          });
      world.barrier();
      if (world.rank() == 0) {
        const std::uint8_t bytes[16] = {};
        const ConstBlock block{bytes, sizeof bytes};
        plane->send(1, 4, {}, {&block, 1});
        plane->send(1, 5, {}, {&block, 1});  // lands in the ring, never handled
      } else {
        require(eventually([&] { return plane->broken(); }), "not broken");
        std::this_thread::sleep_for(50ms);
        std::lock_guard lock(mutex);
        require(errors.size() == 1, errors.size(), " errors");
        const std::string expected = throws ? "threw: bad header on channel 4" : "left 12 of its 16";
        require(errors[0].find(expected) != std::string::npos, "error: ", errors[0]);
      }
      world.barrier();
      return std::string("ok");
    }));
  }
}

}  // namespace
}  // namespace libai::comm
