// The `ucx` communicator backend: the ranks are processes, on one node or several, and the
// data moves over UCX (runtime/comm/ucx_transport.h). Every process calls
// make_ucx_communicator with its rank and the same size, address and port; rank 0 listens
// there (runtime/comm/rendezvous.h) and the others join it, then every rank connects to every
// other over UCX.
//
//   comm::UcxGroupOptions options;
//   options.rank = node_rank;  options.size = nodes;
//   options.addr = "10.0.0.1"; options.port = 29500;      // rank 0's address
//   auto comm = comm::make_ucx_communicator(options);     // blocks until all ranks are there
//   comm->all_reduce(gradients);                          // as with any Communicator
//
// Port 0 on rank 0 picks a free port and tells options.on_listening (a launcher passes it on).
//
// One background thread per process world owns the UCX worker and runs the queued operations
// in call order, so an *_async call overlaps with the caller's compute. Communicators from
// new_group share that thread and the connections (each group has its own id in the message
// tags); a collective of one group waits behind the operations queued before it on any group.
// send and recv are posted in call order but do not block the queue: a rank may send to a
// peer and then receive from it while the peer does the same.
//
// Algorithms (Note [UCX collectives] in ucx_collectives.cc): direct exchange up to 64 KiB per
// rank, ring reduce-scatter + all-gather above; ring-pipelined broadcast. Reductions of bf16
// and f16 accumulate in f32; every rank gets bit-identical results, the same in every run.
//
// Errors (Note [UCX failure detection] in ucx_world.h): ranks that disagree on a collective
// fail on every rank with a CommunicationError naming each rank's op, dtype and count; a dead
// peer fails the ranks waiting on it, and through them every other rank, within about a
// second, naming it; anything else waits at most the timeout. After an error this
// communicator and every one sharing its connections are broken: every later call throws.
//
// CommStats::bytes_sent counts the payload this rank put on the wire (headers not included):
// ring all_reduce 2(n-1)/n of the tensor, direct all_reduce (n-1) x the tensor, all_gather
// (n-1) x the input, reduce_scatter (n-1)/n of the input, broadcast by position in the ring.
#pragma once

#include <memory>

#include "runtime/comm/communicator.h"
#include "runtime/comm/process_group.h"

namespace libai::comm {

// The options of process_group.h (cross_memory_attach does not apply).
using UcxGroupOptions = ProcessGroupOptions;

std::shared_ptr<Communicator> make_ucx_communicator(const UcxGroupOptions& options);

}  // namespace libai::comm
