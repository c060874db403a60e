// The `shm` communicator backend: the ranks are processes of one host and the data moves
// through shared memory or straight between their buffers (cross-memory attach), never through
// a socket. Every process calls make_shm_communicator with its rank and the same size,
// address and port; they meet through runtime/comm/rendezvous.h (rank 0 listens), map each
// other's segments, and from then on talk through memory only.
//
//   comm::ShmGroupOptions options;
//   options.rank = local_rank;  options.size = local_processes;
//   options.port = 29500;                                 // rank 0's rendezvous on addr
//   auto comm = comm::make_shm_communicator(options);     // blocks until all ranks are there
//   comm->all_reduce(gradients);                          // as with any Communicator
//   comm->abort("node 2 stopped answering");              // from the control plane
//
// The rules of communicator.h hold: operations run in call order on one background thread per
// process (shared by the communicators of new_group, as in the ucx backend), mismatched
// collectives fail on every rank naming each rank's op, dtype and count, bf16 and f16 reduce
// in f32 and every rank gets bit-identical results, every wait is bounded by the timeout.
//
// Failures (Note [Same-host data plane] in shm_transport.h): a peer process that dies fails
// the ranks waiting on it within about a second, naming it; a rank that fails marks its
// segment broken with the reason, so the ranks waiting on it report that first cause; abort()
// wakes every wait of this process at once. After an error every later call throws.
//
// Collectives (Note [Shm collectives] in shm_collectives.cc): up to 64 KiB, and always when
// cross-memory attach is refused (EPERM or ENOSYS: a container's seccomp filter, say), they
// go through staging buffers in shared memory; above, with process_vm_readv/writev straight
// between the ranks' tensors: rank r reduces slice r and writes it into every rank's tensor,
// two barriers and no staging copy. Point to point streams through a ring per ordered pair of
// ranks (in order per (peer, tag); a send completes once its bytes are in the ring).
#pragma once

#include <memory>

#include "runtime/comm/communicator.h"
#include "runtime/comm/process_group.h"

namespace libai::comm {

// The options of process_group.h, cross_memory_attach included.
using ShmGroupOptions = ProcessGroupOptions;

std::shared_ptr<Communicator> make_shm_communicator(const ShmGroupOptions& options);

// Whether `comm` (an shm communicator) runs its large collectives with cross-memory attach:
// the option allowed it and every rank's probe succeeded.
bool shm_uses_cross_memory_attach(const Communicator& comm);

}  // namespace libai::comm
