// SPMD on threads: run one body per rank of a local group, as torchrun would on processes.
//
//   comm::run_spmd_threads(4, [&](comm::Communicator& comm) {
//     Tensor g = gradients_of(comm.rank());
//     comm.all_reduce(g);
//   });
//
// The body runs on `size` new threads, rank r on thread r. When a body throws, the group is
// aborted (the other ranks wake from any wait with a CommunicationError instead of waiting
// for the timeout), every thread is joined, and the first error is rethrown unchanged.
//
// Threads: every rank thread computes on the default cpu device (runtime/threads.h), whose
// pool runs one parallel_for region at a time, so N ranks use at most the device budget plus
// the N rank threads. Budgets are per device, not per thread, and must sum to at most the
// cores, so this helper does not change them; callers that want a budget per rank give each
// rank its own cpu:r device with set_thread_budget and set_current_cpu_device in the body.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "runtime/comm/communicator.h"

namespace libai::comm {

void run_spmd_threads(int size, const std::function<void(Communicator&)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60));

// SPMD on processes: `size` forked children on this host, each with a communicator of
// `backend` ("ucx" over loopback, as separate hosts would talk, or "shm") (rank 0 picks a free port and passes it on through a pipe), as separate nodes
// would run. A child returns nothing to the parent but its success: bodies write results
// to files. When a child fails (its exception, a signal, or the deadline of timeout + 30 s,
// after which the remaining children are killed), the others are woken by the communicator's
// failure detection, every child is reaped, and one CommunicationError lists each failed
// rank with its message. fork() copies only the calling thread: call this before the
// process starts threads of its own (compute pools included).
void run_spmd_processes(int size, const std::function<void(Communicator&)>& body,
                        std::chrono::milliseconds timeout = std::chrono::seconds(60),
                        const std::string& backend = "ucx");

}  // namespace libai::comm
