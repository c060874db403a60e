// The ucx communicator's rendezvous, in-process on threads: its failures name the address
// and what timed out. The communicator cases (every backend, real processes) are in
// communicator_dist_test.cc.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "runtime/comm/rendezvous.h"
#include "runtime/comm/ucx_communicator.h"
#include "runtime/error.h"

namespace libai::comm {
namespace {

using namespace std::chrono_literals;

// In-process: rendezvous failures name the address and what timed out.
TEST(UcxRendezvous, NobodyListeningTimesOutNamingTheAddress) {
  UcxGroupOptions options;
  options.rank = 1;
  options.size = 2;
  options.port = 1;  // privileged and closed: connection refused
  options.timeout = 300ms;
  try {
    make_ucx_communicator(options);
    FAIL() << "no error";
  } catch (const CommunicationError& e) {
    EXPECT_NE(
        std::string(e.what()).find("rendezvous at 127.0.0.1:1, rank 1 of 2: could not connect"),
        std::string::npos)
        << e.what();
  }
}

std::string rendezvous_error(RendezvousOptions options) {
  try {
    Rendezvous store(std::move(options));
    return "no error";
  } catch (const CommunicationError& e) {
    return e.what();
  }
}

TEST(UcxRendezvous, WrongWorldSizeAndMissingRanksFailEveryone) {
  for (const int joiner_size : {2, 3}) {  // 2: disagrees with rank 0; 3: rank 2 never comes
    std::promise<int> port;
    auto server = std::async(std::launch::async, [&] {
      return rendezvous_error({0, 3, "127.0.0.1", 0, 1500ms, [&](int p) { port.set_value(p); }});
    });
    const int p = port.get_future().get();
    const std::string joiner = rendezvous_error({1, joiner_size, "127.0.0.1", p, 3000ms, {}});
    const std::string host = server.get();
    const std::string expected =
        joiner_size == 2 ? "rank 1 joined with world size 2, rank 0 has 3" : "missing rank(s) 2";
    EXPECT_NE(host.find(str_cat("rendezvous at 127.0.0.1:", p)), std::string::npos) << host;
    EXPECT_NE(host.find(expected), std::string::npos) << host;
    EXPECT_NE(joiner.find(expected), std::string::npos) << joiner;
  }
}

TEST(UcxRendezvous, ExchangesBlobsAmongThreeRanks) {
  std::promise<int> port;
  std::shared_future<int> chosen = port.get_future().share();
  std::vector<std::future<std::vector<Blob>>> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      RendezvousOptions options{r, 3, "127.0.0.1", r == 0 ? 0 : chosen.get(), 5000ms, {}};
      if (r == 0) options.on_listening = [&](int p) { port.set_value(p); };
      Rendezvous store(options);
      store.exchange(Blob(std::size_t(r), std::uint8_t(r)));  // a first round
      return store.exchange(Blob(std::size_t(r + 1), std::uint8_t(10 + r)));
    }));
  }
  for (auto& rank : ranks) {
    const std::vector<Blob> all = rank.get();
    ASSERT_EQ(all.size(), 3u);
    for (int q = 0; q < 3; ++q)
      EXPECT_EQ(all[std::size_t(q)], Blob(std::size_t(q + 1), std::uint8_t(10 + q)));
  }
}

}  // namespace
}  // namespace libai::comm
