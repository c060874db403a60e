// A minimal TCP rendezvous so that N processes find each other before they talk over UCX:
// rank 0 listens on ADDR:PORT, the other ranks connect to it (retrying until the deadline),
// and every exchange() hands each rank the blobs of all ranks (UCX worker addresses, or a few
// small values to agree on). The actor runtime's control plane can replace it later.
//
//   RendezvousOptions options{.rank = r, .size = n, .addr = "127.0.0.1", .port = 29500,
//                             .timeout = std::chrono::seconds(30)};
//   Rendezvous store(options);                       // rank 0 listens; the others join
//   std::vector<Blob> all = store.exchange(my_bytes);  // all[i] is rank i's blob
//
// Port 0 on rank 0 picks a free port; port() gives it and options.on_listening is told,
// so that a launcher can pass it on to the other ranks.
//
// Every step has one deadline (construction: `timeout` for all ranks to join; each exchange:
// `timeout` again). Errors are CommunicationError naming the address, this rank and what
// timed out or disagreed: nobody listening, a world size that differs between ranks, a rank
// joining twice, ranks missing at the deadline. When rank 0 fails it tells the ranks that
// joined why, so they report rank 0's reason instead of a bare timeout. A connection that is
// not a rank's (bytes that are not a hello, or silence for `hello_wait`) is logged with its
// address and dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace libai::comm {

using Blob = std::vector<std::uint8_t>;

struct RendezvousOptions {
  int rank = 0;
  int size = 1;
  std::string addr = "127.0.0.1";  // rank 0 binds it; the others connect to it
  int port = 0;                    // 0 on rank 0: pick a free port
  std::chrono::milliseconds timeout{30000};
  std::function<void(int port)> on_listening;  // rank 0, once it listens
  // Rank 0 drops a connection that sent no hello for this long, logging its address (a port
  // scanner, a client of something else); the ranks behind it are not held meanwhile.
  std::chrono::milliseconds hello_wait{10000};
};

class Rendezvous {
 public:
  // Rank 0 returns once every rank has joined; another rank once rank 0 accepted it.
  explicit Rendezvous(RendezvousOptions options);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Every rank calls it, in the same order as its other exchanges; returns the blobs of all
  // ranks by rank (this rank's own included).
  std::vector<Blob> exchange(std::span<const std::uint8_t> mine);

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  int port() const { return port_; }
  // "127.0.0.1:29500", as error messages name it.
  std::string endpoint() const;

 private:
  void listen_and_accept();
  void join();
  [[noreturn]] void fail(const std::string& what);

  RendezvousOptions options_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::vector<int> peer_fds_;  // rank 0: by rank (its own slot -1); others: [0] = rank 0
};

}  // namespace libai::comm
