// Internal to the ucx communicator: the thread that owns this process's UcxWorld and runs the
// queued operations of every communicator sharing it, in call order.
//
//   Executor executor(rendezvous_options);   // connects; throws CommunicationError on failure
//   auto work = std::make_shared<UcxWork>(std::vector<Tensor>{t});
//   executor.submit({.run = [](UcxWorld& world) { ... }, .work = work});
//   work->wait();
//
// A collective task runs to completion on the thread; a point-to-point task only posts its
// transfer, which then completes in the background while later tasks run (so a rank can send
// to a peer and receive from it while the peer does the same). The first error breaks the
// world: that task's Work gets the error, every later submit throws it, and queued tasks fail.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/queued_work.h"
#include "runtime/comm/ucx_world.h"

namespace libai::comm::detail {

// The Work of a queued operation (queued_work.h).
using UcxWork = QueuedWork;
using UcxWorkPtr = QueuedWorkPtr;

// One queued operation: either `run` (a collective) or `post` (a point-to-point transfer).
struct Task {
  std::function<void(UcxWorld&)> run;
  std::function<TransferPtr(UcxWorld&)> post;
  std::string what;  // point to point: the prefix of its errors
  UcxWorkPtr work;
};

class Executor {
 public:
  explicit Executor(const RendezvousOptions& options);
  // Runs what is queued, waits for the transfers in flight, then says goodbye to every rank.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Throws CommunicationError at once when the world is broken.
  void submit(Task task);
  // From any thread: the running operation's wait throws CommunicationError(reason) at once,
  // the world breaks (the peers are told), queued and later operations fail.
  void abort(const std::string& reason);

  std::uint32_t next_group_id = 1;  // executor thread only; group 0 is the world

 private:
  struct InFlight {
    TransferPtr transfer;
    Clock::time_point deadline;
    std::string what;
    UcxWorkPtr work;
  };

  void main(const RendezvousOptions& options, std::promise<void>& ready);
  void execute(Task& task);
  bool poll_point_to_point();
  void break_world(const std::string& reason);

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable queue_changed_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::string broken_;  // guarded by mutex_: read by callers, written by the thread
  // The executor thread's own:
  std::unique_ptr<UcxWorld> world_;
  std::chrono::milliseconds timeout_{0};
  std::vector<InFlight> in_flight_;
};

}  // namespace libai::comm::detail
