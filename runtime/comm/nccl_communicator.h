// The `nccl` communicator backend: ranks are GPUs (one per process), collectives run on a
// stream of the communicator's own, ordered after the device's compute stream. Built where the
// CUDA toolkit (with NCCL) is found; elsewhere make_nccl_communicator throws Unsupported.
//
//   comm::NcclGroupOptions options;
//   options.rank = r;  options.size = n;  options.device = local_gpu;
//   options.addr = "10.0.0.1";  options.port = 29500;     // the rendezvous of rank 0
//   auto comm = comm::make_nccl_communicator(options);
//   comm->all_reduce(grad_on_gpu);
//
// Ordering and completion: an *_async call waits (on the GPU, with an event) for the work
// already queued on the device's compute stream, enqueues the NCCL call on the communicator's
// stream and returns a Work whose wait() blocks the host until the call finished, within the
// timeout (then the communicator is aborted with ncclCommAbort and the wait throws
// CommunicationError). NCCL cannot tell ranks that disagree on a collective; a mismatch shows
// as a timeout here, not as the named error of the local and ucx backends.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "runtime/comm/communicator.h"

namespace libai::comm {

struct NcclGroupOptions {
  int rank = 0;
  int size = 1;
  int device = 0;                  // cuda:device holds this rank's tensors
  std::string addr = "127.0.0.1";  // rank 0's rendezvous (runtime/comm/rendezvous.h)
  int port = 0;
  std::chrono::milliseconds timeout{60000};
};

// True when this build has the NCCL backend (a GPU may still be missing at run time).
bool nccl_available();
std::shared_ptr<Communicator> make_nccl_communicator(const NcclGroupOptions& options);

}  // namespace libai::comm
