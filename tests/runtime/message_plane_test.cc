// The message plane's contract over ranks that are threads of this process (a local group):
// the cases of tests/runtime/message_plane_cases.h, instantiated for every plane factory.
#include <gtest/gtest.h>

#include <thread>

#include "runtime/comm/local_communicator.h"
#include "tests/runtime/message_plane_cases.h"

namespace libai::comm::plane_tests {
namespace {

// Runs `body` on `size` threads, each with a plane made over its rank of a local group; the
// planes close at the same time, on their threads (a plane's close waits for its peers').
// Returns each rank's error, empty when it passed.
std::vector<std::string> run_on_threads(int size, const PlaneFactory& make,
                                        const std::function<void(Rank&)>& body,
                                        std::chrono::milliseconds timeout = 5s) {
  auto comms = LocalGroup::create(size, std::chrono::seconds(60));
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        Rank rank{comms[std::size_t(r)], make(comms[std::size_t(r)], timeout)};
        body(rank);
      } catch (const std::exception& e) {
        errors[std::size_t(r)] = e.what();
        LocalGroup::abort(*comms[std::size_t(r)], str_cat("rank ", r, " failed: ", e.what()));
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

class PlaneOnThreads : public ::testing::TestWithParam<PlaneParam> {
 protected:
  void expect_passes(int size, const std::function<void(Rank&)>& body) {
    const auto errors = run_on_threads(size, GetParam().make, body);
    for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
};

TEST_P(PlaneOnThreads, OrderAcrossChannelsAndSenderThreads) {
  expect_passes(2, order_across_channels_and_threads);
  expect_passes(3, order_across_channels_and_threads);
}
TEST_P(PlaneOnThreads, LargePayloadsAndSplitReads) {
  expect_passes(2, large_payloads_and_split_reads);
}
TEST_P(PlaneOnThreads, HandlerExceptionBreaksThePlane) {
  expect_passes(2, handler_exception_breaks_the_plane);
}
TEST_P(PlaneOnThreads, UnreadPayloadBreaksThePlane) {
  expect_passes(2, unread_payload_breaks_the_plane);
}
TEST_P(PlaneOnThreads, AbortWakesAndBreaks) { expect_passes(2, abort_wakes_and_breaks); }

// A plane that does not hear from a peer for longer than its communicator's timeout stays
// whole: the keepalives keep the posted receives alive (here 4 x the timeout of 300 ms).
TEST_P(PlaneOnThreads, IdleLongerThanTheTimeoutStaysWhole) {
  auto comms = LocalGroup::create(2, 300ms);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        auto plane = GetParam().make(comms[std::size_t(r)], 300ms);
        ErrorLog log;
        std::atomic<int> got{0};
        plane->start(
            [&](IncomingMessage& m) {
              std::vector<std::uint8_t> b(m.payload_bytes());
              m.read(b.data(), b.size());
              ++got;
            },
            log.handler());
        std::this_thread::sleep_for(1200ms);
        plane->send(1 - r, 1, make_header(r, 0, 0), {});
        const auto deadline = Clock::now() + 5s;
        while (got.load() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
        require(got.load() == 1, "rank ", r, ": the message after the idle time did not arrive");
        require(log.now().empty(), "rank ", r,
                ": on_error: ", log.now().empty() ? "" : log.now().front());
        comms[std::size_t(r)]->barrier();
      } catch (const std::exception& e) {
        errors[std::size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(P2pMessagePlane, RejectsBadArguments) {
  auto comms = LocalGroup::create(1, 1s);
  EXPECT_THROW(make_p2p_message_plane(nullptr, 1s), Error);
  auto plane = make_p2p_message_plane(comms[0], 1s);
  EXPECT_EQ(plane->rank(), 0);
  EXPECT_EQ(plane->size(), 1);
  EXPECT_THROW(plane->send(0, 1, {}, {}), Error);  // itself
  EXPECT_THROW(plane->send(1, 1, {}, {}), Error);  // not a rank
  std::vector<std::uint8_t> huge(kMaxMessageHeader + 1);
  auto two = LocalGroup::create(2, 1s);
  auto p0 = make_p2p_message_plane(two[0], 1s);
  try {
    p0->send(1, 1, huge, {});
    ADD_FAILURE() << "a header over the limit was sent";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("header of 65537 bytes"), std::string::npos) << e.what();
  }
  p0->abort("done");
}

INSTANTIATE_TEST_SUITE_P(P2p, PlaneOnThreads,
                         ::testing::Values(PlaneParam{"p2p", make_p2p_message_plane}), plane_name);

}  // namespace
}  // namespace libai::comm::plane_tests
