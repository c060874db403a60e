// The message plane's contract (runtime/comm/message_plane.h) as test cases that any
// implementation must pass: each case is a body that runs on every rank at once, over ranks
// that are threads (tests/runtime/message_plane_test.cc, a local group) or processes
// (tests/runtime/message_plane_dist_test.cc, the ucx communicator). A plane is made by a
// PlaneFactory, so a new transport is tested by instantiating the suites with its factory:
//
//   INSTANTIATE_TEST_SUITE_P(Shm, PlaneOnThreads,
//                            ::testing::Values(PlaneParam{"shm", make_shm_plane}), plane_name);
//
// Payload bytes and headers are functions of (sender, sequence, index), so every receiver
// checks every byte against values it computes itself.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/message_plane.h"
#include "runtime/error.h"

namespace libai::comm::plane_tests {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using PlaneFactory = std::function<std::shared_ptr<MessagePlane>(std::shared_ptr<Communicator>,
                                                                 std::chrono::milliseconds)>;
struct PlaneParam {
  std::string name;
  PlaneFactory make;
  std::string backend = "ucx";  // the forked ranks' communicator (dist tests)
};
inline std::string plane_name(const ::testing::TestParamInfo<PlaneParam>& info) {
  return info.param.name;
}

// A check that failed on a rank.
struct CaseFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
template <typename... Args>
void require(bool ok, const Args&... args) {
  if (!ok) throw CaseFailure(str_cat(args...));
}

// What one rank's case sees: the plane under test and the communicator it was made over
// (for barriers between the phases of a case).
struct Rank {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<MessagePlane> plane;
  int rank() const { return world->rank(); }
  int size() const { return world->size(); }
};

inline std::uint8_t payload_byte(int from, int seq, std::uint64_t i) {
  return std::uint8_t((std::uint64_t(from) * 131 + std::uint64_t(seq) * 7 + i * 13 + (i >> 9)) &
                      0xff);
}
inline std::vector<std::uint8_t> payload(int from, int seq, std::uint64_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  for (std::uint64_t i = 0; i < bytes; ++i) out[i] = payload_byte(from, seq, i);
  return out;
}
// The first mismatching byte of a received payload, or -1.
inline std::int64_t first_mismatch(const std::uint8_t* got, int from, int seq,
                                   std::uint64_t bytes) {
  for (std::uint64_t i = 0; i < bytes; ++i)
    if (got[i] != payload_byte(from, seq, i)) return std::int64_t(i);
  return -1;
}

// The header of message `seq` of a sender: the sequence number, then `filler` bytes of a
// pattern (a long header exercises a transport's path for headers that do not fit inline).
inline std::vector<std::uint8_t> make_header(int from, int seq, std::size_t filler) {
  std::vector<std::uint8_t> h(sizeof(int) + filler);
  std::memcpy(h.data(), &seq, sizeof seq);
  for (std::size_t i = 0; i < filler; ++i) h[sizeof(int) + i] = std::uint8_t(from * 17 + seq + i);
  return h;
}
inline int header_seq(std::span<const std::uint8_t> h) {
  require(h.size() >= sizeof(int), "a header of ", h.size(), " bytes");
  int seq = 0;
  std::memcpy(&seq, h.data(), sizeof seq);
  return seq;
}
inline bool header_intact(std::span<const std::uint8_t> h, int from, int seq) {
  for (std::size_t i = sizeof(int); i < h.size(); ++i)
    if (h[i] != std::uint8_t(from * 17 + seq + (i - sizeof(int)))) return false;
  return true;
}

// Errors a plane reported through on_error, and a way to wait for the first.
struct ErrorLog {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> errors;
  MessagePlane::ErrorHandler handler() {
    return [this](const std::string& e) {
      std::lock_guard lock(mutex);
      errors.push_back(e);
      changed.notify_all();
    };
  }
  std::vector<std::string> wait_for_one(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, timeout, [&] { return !errors.empty(); });
    return errors;
  }
  std::vector<std::string> now() {
    std::lock_guard lock(mutex);
    return errors;
  }
  // The first error, "" when none: for a message built before its check is known to fail
  // (require() takes its arguments eagerly; front() of an empty vector is undefined, and
  // UBSan stops the rank on it).
  std::string first() {
    std::lock_guard lock(mutex);
    return errors.empty() ? std::string() : errors.front();
  }
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What an empty message from rank `from` to rank `to` on `channel` throws (a
// CommunicationError's message), or "" when the send succeeds.
inline std::string send_error(MessagePlane& plane, int to, std::uint32_t channel, int from) {
  try {
    plane.send(to, channel, make_header(from, 0, 0), {});
  } catch (const CommunicationError& e) {
    return e.what();
  }
  return "";
}

// Every rank sends to every other rank from 3 threads at once, 120 messages per thread and
// peer, each thread on its own channel: payloads of 0 to 3 blocks (empty, a few bytes, up to
// 200 KB), some headers too long for a frame. Every receiver checks that each (sender,
// channel) arrives in order, exactly once, with every header and payload byte intact.
inline void order_across_channels_and_threads(Rank& r) {
  constexpr int kThreads = 3, kMessages = 120;
  const int n = r.size(), me = r.rank();
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::pair<int, std::uint32_t>, int> next;  // (from, channel) -> expected seq
  int received = 0;
  std::string problem;
  ErrorLog errors;
  r.plane->start(
      [&](IncomingMessage& m) {
        const int seq = header_seq(m.header());
        std::vector<std::uint8_t> got(m.payload_bytes());
        m.read(got.data(), got.size());
        std::string bad;
        if (!header_intact(m.header(), m.from(), seq)) bad = "its header is damaged";
        if (const auto at = first_mismatch(got.data(), m.from(), seq, got.size()); at >= 0)
          bad = str_cat("payload byte ", at, " of ", got.size(), " is wrong");
        std::lock_guard lock(mutex);
        int& expected = next[{m.from(), m.channel()}];
        if (seq != expected) bad = str_cat("message ", seq, " came when ", expected, " was next");
        if (!bad.empty() && problem.empty())
          problem = str_cat("from rank ", m.from(), " on channel ", m.channel(), ": ", bad);
        expected = seq + 1;
        ++received;
        changed.notify_all();
      },
      errors.handler());
  std::vector<std::thread> senders;
  std::vector<std::string> send_errors(kThreads);
  for (int t = 0; t < kThreads; ++t)
    senders.emplace_back([&, t] {
      try {
        for (int seq = 0; seq < kMessages; ++seq)
          for (int peer = 0; peer < n; ++peer) {
            if (peer == me) continue;
            const int blocks = seq % 4;
            const std::uint64_t total = seq % 5 == 0 ? 0 : std::uint64_t(seq * 1733 % 200000) + 1;
            const auto bytes = payload(me, seq, total);
            std::vector<ConstBlock> parts;
            std::uint64_t offset = 0;
            for (int b = 0; b < blocks && total > 0; ++b) {
              const std::uint64_t size =
                  b + 1 == blocks ? total - offset : total / std::uint64_t(blocks);
              parts.push_back({bytes.data() + offset, std::size_t(size)});
              offset += size;
            }
            if (blocks == 0 && total > 0) parts.push_back({bytes.data(), std::size_t(total)});
            const auto header = make_header(me, seq, seq % 17 == 0 ? 2000 : seq % 40);
            r.plane->send(peer, 10 + std::uint32_t(t), header, parts);
          }
      } catch (const std::exception& e) {
        send_errors[std::size_t(t)] = e.what();
      }
    });
  for (auto& s : senders) s.join();
  for (const auto& e : send_errors) require(e.empty(), "rank ", me, ": a send failed: ", e);
  const int expected = (n - 1) * kThreads * kMessages;
  {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, 60s, [&] { return received == expected || !problem.empty(); });
    require(problem.empty(), "rank ", me, ": ", problem);
    require(received == expected, "rank ", me, ": ", received, " of ", expected,
            " messages arrived within 60 s");
  }
  require(errors.now().empty(), "rank ", me, ": on_error: ", errors.first());
  r.world->barrier();  // nobody closes while another still sends
}

// Rank r sends to rank r + 1 (mod n): a 64 MB single block, then blocks of 16 MB, 1 MB + 3
// and 7 bytes. The sender overwrites each payload as soon as send() returned (the contract:
// its memory may be reused then); the receiver reads the first whole and the second in pieces
// that split blocks and span block boundaries.
inline void large_payloads_and_split_reads(Rank& r) {
  const int n = r.size(), me = r.rank(), to = (me + 1) % n, from = (me + n - 1) % n;
  constexpr std::uint64_t kBig = 64ull << 20;
  const std::vector<std::uint64_t> sizes{16ull << 20, (1ull << 20) + 3, 7};
  std::mutex mutex;
  std::condition_variable changed;
  int received = 0;
  std::string problem;
  ErrorLog errors;
  r.plane->start(
      [&](IncomingMessage& m) {
        const int seq = header_seq(m.header());
        std::vector<std::uint8_t> got(m.payload_bytes());
        std::string bad;
        if (m.from() != from) bad = str_cat("a message from rank ", m.from());
        if (seq == 0) {
          m.read(got.data(), got.size());
        } else {
          // 1000 bytes, most of the first block, then pieces that span the boundaries: 5 + 5,
          // the second block but 2, 2 + 1, the last 6.
          const std::vector<std::size_t> pieces{
              1000, std::size_t(sizes[0]) - 1000 - 5, 10, std::size_t(sizes[1]) - 7, 3, 6};
          std::size_t at = 0;
          for (std::size_t p : pieces) {
            m.read(got.data() + at, p);
            at += p;
          }
          require(at == got.size(), "pieces of ", at, " bytes for ", got.size());
          bool threw = false;
          try {
            std::uint8_t extra = 0;
            m.read(&extra, 1);
          } catch (const CommunicationError&) {
            threw = true;
          }
          if (!threw) bad = "a read past the end of the payload did not throw";
        }
        if (const auto at = first_mismatch(got.data(), m.from(), seq, got.size());
            at >= 0 && bad.empty())
          bad = str_cat("payload byte ", at, " of message ", seq, " is wrong");
        std::lock_guard lock(mutex);
        if (problem.empty() && !bad.empty()) problem = bad;
        ++received;
        changed.notify_all();
      },
      errors.handler());
  auto big = payload(me, 0, kBig);
  r.plane->send(to, 3, make_header(me, 0, 0), std::vector<ConstBlock>{{big.data(), big.size()}});
  std::memset(big.data(), 0xAB, big.size());
  auto parts = payload(me, 1, sizes[0] + sizes[1] + sizes[2]);
  std::vector<ConstBlock> blocks{{parts.data(), sizes[0]},
                                 {parts.data() + sizes[0], sizes[1]},
                                 {parts.data() + sizes[0] + sizes[1], sizes[2]}};
  r.plane->send(to, 3, make_header(me, 1, 0), blocks);
  std::memset(parts.data(), 0xCD, parts.size());
  {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, 60s, [&] { return received == 2 || !problem.empty(); });
    require(problem.empty(), "rank ", me, ": ", problem);
    require(received == 2, "rank ", me, ": ", received, " of 2 messages within 60 s");
  }
  require(errors.now().empty(), "rank ", me, ": on_error: ", errors.first());
  r.world->barrier();
}

// A handler that throws breaks its plane: on_error gets the exception's message once, and
// later sends throw. Rank 0 sends rank 1 a message whose handler throws.
inline void handler_exception_breaks_the_plane(Rank& r) {
  ErrorLog errors;
  std::atomic<int> calls{0};
  r.plane->start(
      [&](IncomingMessage& m) {
        ++calls;
        std::vector<std::uint8_t> got(m.payload_bytes());
        m.read(got.data(), got.size());
        throw std::runtime_error(str_cat("boom on channel ", m.channel()));
      },
      errors.handler());
  if (r.rank() == 0) {
    const auto bytes = payload(0, 0, 100);
    r.plane->send(1, 5, make_header(0, 0, 0),
                  std::vector<ConstBlock>{{bytes.data(), bytes.size()}});
  }
  if (r.rank() == 1) {
    const auto seen = errors.wait_for_one(10s);
    require(seen.size() == 1 && contains(seen[0], "boom on channel 5"), "rank 1: on_error got ",
            seen.size(), " errors", seen.empty() ? "" : ": ", seen.empty() ? "" : seen[0]);
    require(r.plane->broken(), "rank 1: the plane is not broken after its handler threw");
    require(contains(send_error(*r.plane, 0, 5, 1), "boom on channel 5"),
            "rank 1: a send after the failure did not throw the failure");
    std::this_thread::sleep_for(100ms);
    require(errors.now().size() == 1, "rank 1: on_error was told ", errors.now().size(), " times");
  }
  r.world->barrier();
  r.plane->abort("the case ended");  // rank 1 will not say goodbye: nobody waits for it
}

// A handler that leaves part of the payload unread breaks the plane with an error that says so.
inline void unread_payload_breaks_the_plane(Rank& r) {
  ErrorLog errors;
  r.plane->start([&](IncomingMessage& m) { (void)m; }, errors.handler());
  if (r.rank() == 0) {
    const auto bytes = payload(0, 0, 100);
    r.plane->send(1, 6, make_header(0, 0, 0),
                  std::vector<ConstBlock>{{bytes.data(), bytes.size()}});
  }
  if (r.rank() == 1) {
    const auto seen = errors.wait_for_one(10s);
    require(seen.size() == 1 && contains(seen[0], "unread") && contains(seen[0], "rank 0"),
            "rank 1: on_error got ", seen.empty() ? std::string("nothing") : seen[0]);
    require(r.plane->broken(), "rank 1: the plane is not broken");
  }
  r.world->barrier();
  r.plane->abort("the case ended");
}

// abort() breaks the plane at once: sends throw the reason, nothing more reaches the handler,
// and a send blocked on a peer that does not drain (rank 0 aborted, so its plane takes
// nothing) wakes within a second of its own plane's abort. A transport that buffers the
// whole payload may finish that send before the abort: then it must simply have returned.
inline void abort_wakes_and_breaks(Rank& r) {
  std::atomic<int> calls{0};
  ErrorLog errors;
  r.plane->start(
      [&](IncomingMessage& m) {
        ++calls;
        std::vector<std::uint8_t> got(m.payload_bytes());
        m.read(got.data(), got.size());
      },
      errors.handler());
  if (r.rank() == 0) {
    r.plane->abort("rank 0 gives up");
    require(r.plane->broken(), "rank 0: not broken after abort");
    require(contains(send_error(*r.plane, 1, 1, 0), "rank 0 gives up"),
            "rank 0: a send after abort did not throw its reason");
    r.plane->abort("a second reason");  // harmless; the first stays
    const std::string again = send_error(*r.plane, 1, 1, 0);
    require(contains(again, "rank 0 gives up"), "rank 0: the reason changed: ", again);
  }
  r.world->barrier();
  if (r.rank() == 1) {
    auto big = payload(1, 0, 64ull << 20);
    std::atomic<bool> returned{false};
    std::string error;
    std::thread sender([&] {
      try {
        r.plane->send(0, 2, make_header(1, 0, 0),
                      std::vector<ConstBlock>{{big.data(), big.size()}});
        returned = true;
      } catch (const CommunicationError& e) {
        error = e.what();
      }
    });
    std::this_thread::sleep_for(300ms);
    const auto aborted = Clock::now();
    r.plane->abort("rank 1 gives up");
    sender.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - aborted).count();
    require(returned || contains(error, "rank 1 gives up"), "rank 1: the blocked send ended with '",
            error, "'");
    require(seconds < 1.0, "rank 1: the blocked send woke ", seconds, " s after the abort");
  }
  r.world->barrier();
  if (r.rank() == 0) {
    std::this_thread::sleep_for(200ms);
    require(calls.load() == 0, "rank 0: its handler ran ", calls.load(), " times after abort");
  }
}

}  // namespace libai::comm::plane_tests
