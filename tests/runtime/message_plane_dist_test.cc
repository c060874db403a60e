// The message plane's contract over ranks that are processes (forked; the p2p plane over the
// ucx communicator on loopback, the shm plane over the shm communicator): the cases of
// tests/runtime/message_plane_cases.h, and a peer that dies.
#include <gtest/gtest.h>
#include <signal.h>

#include "runtime/comm/spmd.h"
#include "tests/runtime/message_plane_cases.h"

namespace libai::comm::plane_tests {
namespace {

// Runs `body` on `size` forked ranks, each with a plane made over its communicator (of
// `backend`). Throws the ranks' failures (run_spmd_processes lists each failed rank).
void run_on_processes(int size, const PlaneFactory& make, const std::function<void(Rank&)>& body,
                      std::chrono::milliseconds timeout = 5s, const std::string& backend = "ucx") {
  run_spmd_processes(
      size,
      [&](Communicator& comm) {
        // The plane closes before the communicator does (at the end of this body).
        std::shared_ptr<Communicator> world(&comm, [](Communicator*) {});
        Rank rank{world, make(world, timeout)};
        body(rank);
      },
      timeout, backend);
}

class PlaneOnProcesses : public ::testing::TestWithParam<PlaneParam> {
 protected:
  void expect_passes(int size, const std::function<void(Rank&)>& body) {
    try {
      run_on_processes(size, GetParam().make, body, 5s, GetParam().backend);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
};

TEST_P(PlaneOnProcesses, OrderAcrossChannelsAndSenderThreads) {
  expect_passes(3, order_across_channels_and_threads);
}
TEST_P(PlaneOnProcesses, LargePayloadsAndSplitReads) {
  expect_passes(2, large_payloads_and_split_reads);
}
TEST_P(PlaneOnProcesses, HandlerExceptionBreaksThePlane) {
  expect_passes(2, handler_exception_breaks_the_plane);
}
TEST_P(PlaneOnProcesses, UnreadPayloadBreaksThePlane) {
  expect_passes(2, unread_payload_breaks_the_plane);
}
TEST_P(PlaneOnProcesses, AbortWakesAndBreaks) { expect_passes(2, abort_wakes_and_breaks); }

// Rank 1 dies (SIGKILL) after its plane started. Rank 0's plane fails within 5 s with an error
// naming rank 1, through on_error, and a send to it throws: never a hang.
TEST_P(PlaneOnProcesses, ADeadPeerIsANamedError) {
  try {
    run_on_processes(2, GetParam().make, [](Rank& r) {
      ErrorLog errors;
      r.plane->start(
          [](IncomingMessage& m) {
            std::vector<std::uint8_t> b(m.payload_bytes());
            m.read(b.data(), b.size());
          },
          errors.handler());
      r.plane->send(1 - r.rank(), 1, make_header(r.rank(), 0, 0), {});
      r.world->barrier();
      if (r.rank() == 1) ::raise(SIGKILL);
      const auto killed = Clock::now();
      const auto seen = errors.wait_for_one(5s);
      require(!seen.empty(), "rank 0: no error within 5 s of rank 1's death");
      require(contains(seen[0], "rank 1"), "rank 0: the error does not name rank 1: ", seen[0]);
      require(r.plane->broken(), "rank 0: the plane is not broken");
      bool threw = false;
      try {
        auto bytes = payload(0, 1, 1 << 20);
        r.plane->send(1, 1, make_header(0, 1, 0),
                      std::vector<ConstBlock>{{bytes.data(), bytes.size()}});
      } catch (const CommunicationError&) {
        threw = true;
      }
      require(threw, "rank 0: a send to the dead rank did not throw");
      const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
      require(seconds < 6, "rank 0: took ", seconds, " s");
    });
    ADD_FAILURE() << "rank 1 was not reported dead";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 1: killed by signal 9"), std::string::npos) << what;
    EXPECT_EQ(what.find("rank 0:"), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(P2pOverUcx, PlaneOnProcesses,
                         ::testing::Values(PlaneParam{"p2p", make_p2p_message_plane}), plane_name);

std::shared_ptr<MessagePlane> shm_plane(std::shared_ptr<Communicator> world,
                                        std::chrono::milliseconds timeout) {
  return make_shm_message_plane(*world, timeout);
}
INSTANTIATE_TEST_SUITE_P(ShmOverShm, PlaneOnProcesses,
                         ::testing::Values(PlaneParam{"shm", shm_plane, "shm"}), plane_name);

}  // namespace
}  // namespace libai::comm::plane_tests
