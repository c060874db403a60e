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

#include "runtime/comm/communicator.h"

namespace libai::comm {

void run_spmd_threads(int size, const std::function<void(Communicator&)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace libai::comm
