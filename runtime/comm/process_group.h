// What the process-group backends (ucx_communicator.h, shm_communicator.h) share: the options
// every rank passes to make_ucx_communicator / make_shm_communicator, and their checks.
//
//   comm::ProcessGroupOptions options;       // = UcxGroupOptions = ShmGroupOptions
//   options.rank = node_rank;  options.size = nodes;  options.port = 29500;
//   auto comm = comm::make_ucx_communicator(options);
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace libai::comm {

struct ProcessGroupOptions {
  int rank = 0;
  int size = 1;
  std::string addr = "127.0.0.1";  // where rank 0 listens for the rendezvous
  int port = 0;                    // 0 on rank 0: pick a free port (see on_listening)
  // Bounds the rendezvous, the connection set-up and every wait of every operation.
  std::chrono::milliseconds timeout{60000};
  std::function<void(int port)> on_listening;  // rank 0, once it listens
  // shm only: large collectives copy between the processes' buffers directly when the kernel
  // allows it; false forces the staged path (tests, or to compare the two).
  bool cross_memory_attach = true;
};

}  // namespace libai::comm
