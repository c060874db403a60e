// The `local` communicator backend: the ranks are threads of one process and the data moves
// through shared memory. Used for tensor and data parallelism across cpu:N devices of one
// host and, in tests, as the reference every other backend is compared with.
//
//   auto comms = comm::LocalGroup::create(4, std::chrono::seconds(10));
//   std::vector<std::thread> threads;
//   for (int r = 0; r < 4; ++r)
//     threads.emplace_back([&, r] {
//       Tensor g = ...;               // same shape and dtype on every rank
//       comms[r]->all_reduce(g);      // sum over the 4 ranks, bit-identical on every rank
//     });
//   // A rank thread that fails calls LocalGroup::abort(*comms[r], "rank r failed: ...") so
//   // that the others are woken with an error instead of waiting for the timeout.
//   // run_spmd_threads (runtime/comm/spmd.h) does all of this.
//
// Each rank's communicator runs its queued operations in call order on its own background
// thread, so an *_async call overlaps with the caller's compute. See Note [Local collectives]
// in local_communicator.cc for the algorithm; in short, every collective is two rendezvous of
// all ranks, with the data moved between them by every rank at once.
//
// Point to point is eager: send copies the tensor into the receiver's mailbox and completes
// without waiting for the recv, so two ranks may send to each other before receiving.
//
// Errors: ranks that disagree on a collective (op, reduce op, dtype, element count, root), a
// rank that does not arrive within the timeout, a recv that no send matches, or abort() break
// the whole group (and the groups made from it by new_group): every waiting rank is woken with
// a CommunicationError carrying the one message, and every later call on any of its
// communicators throws it at once.
//
// CommStats::bytes_sent counts the bytes of this rank's buffers that other ranks read (or,
// for send, the bytes sent): all_reduce and reduce_scatter (n - 1) / n of the input,
// all_gather (n - 1) x the input, broadcast (n - 1) x the tensor on the root.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"

namespace libai::comm {

class LocalGroup {
 public:
  // One communicator per rank; communicator r has rank r. Every wait of a collective or recv
  // is bounded by `timeout`.
  static std::vector<std::shared_ptr<Communicator>> create(
      int size, std::chrono::milliseconds timeout = std::chrono::seconds(60));

  // Breaks the group of `member` (which must come from create or new_group of a local group)
  // and every group made from it: waiting ranks wake with a CommunicationError carrying
  // `reason`, later calls throw it. The first reason wins; aborting twice is harmless.
  static void abort(Communicator& member, const std::string& reason);
};

}  // namespace libai::comm
