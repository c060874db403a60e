// Communicators: a group of ranks and the collectives that tensor and data parallelism need.
// One interface, several backends chosen from where the ranks live (never by model code):
//   local  threads of one process, through shared memory (runtime/comm/local_communicator.h)
//   ucx    processes on one node or several, over UCX (runtime/comm/ucx_communicator.h)
//   shm    processes of one host, through shared memory (runtime/comm/shm_communicator.h)
//   nccl   GPUs (compiled where the CUDA toolkit is)
//
//   auto comms = comm::LocalGroup::create(4);          // one Communicator per rank (threads)
//   // on rank r's thread:
//   Tensor t = ...;                                    // same shape and dtype on every rank
//   comms[r]->all_reduce(t);                           // in place: the sum over ranks
//   comm::WorkHandle w = comms[r]->all_reduce_async(g); // overlap with compute...
//   w->wait();                                         // ...then wait (rethrows its error)
//   auto tp = comms[r]->new_group({0, 1});             // every rank calls it; null if not a member
//
// Rules every backend keeps:
// - Collectives of one communicator run in the order they were called, which must be the
//   same on every rank. Ranks that disagree on the op, the dtype or the element count get a
//   CommunicationError on every rank naming the op, the ranks and their sizes; never a hang or a
//   silent wrong result.
// - Tensors are contiguous, on the backend's device; reductions need a floating dtype. A
//   tensor handed to an *_async call must stay alive and untouched until its Work completes
//   (the handle keeps a reference to its storage).
// - Every wait has a deadline (the communicator's timeout): a peer that died or never calls
//   the collective gives a CommunicationError naming the peer instead of a hang. After an
//   error, or abort(), the communicator is broken: every later call throws at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace libai::comm {

enum class ReduceOp : uint8_t { sum, max, min };
const char* reduce_op_name(ReduceOp op);

// A collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective completed on this rank; rethrows its error.
  virtual void wait() = 0;
  virtual bool completed() const = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// What a communicator has done, for tests (e.g. "two all-reduces of b x s x h elements per
// transformer layer") and benchmarks.
struct CommStats {
  int64_t all_reduce_calls = 0, all_reduce_elements = 0;
  int64_t all_gather_calls = 0, all_gather_elements = 0;  // output elements
  int64_t reduce_scatter_calls = 0, reduce_scatter_elements = 0;  // input elements
  int64_t broadcast_calls = 0, broadcast_elements = 0;
  int64_t send_calls = 0, recv_calls = 0;
  int64_t bytes_sent = 0;  // by this rank, to other ranks
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;

  // In place: every rank ends with op over the ranks' tensors.
  virtual WorkHandle all_reduce_async(Tensor tensor, ReduceOp op = ReduceOp::sum) = 0;
  // output holds size() * input.numel() elements: rank r's input at [r * n, (r + 1) * n).
  virtual WorkHandle all_gather_async(Tensor input, Tensor output) = 0;
  // input holds size() * output.numel() elements; rank r gets op over the ranks' block r.
  virtual WorkHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op = ReduceOp::sum) = 0;
  // In place: every rank ends with root's tensor.
  virtual WorkHandle broadcast_async(Tensor tensor, int root) = 0;
  // Point to point; a send matches the recv of the same (peer, tag) pair, in order.
  virtual WorkHandle send_async(Tensor tensor, int peer, uint32_t tag = 0) = 0;
  virtual WorkHandle recv_async(Tensor tensor, int peer, uint32_t tag = 0) = 0;
  // A communicator over `ranks` (ranks of this one, sorted, distinct). Every rank of this
  // communicator calls it with the same list, in the same order as its other calls; ranks not
  // in the list get nullptr. The new communicator's rank i is ranks[i].
  virtual std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks) = 0;
  virtual CommStats stats() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  // Breaks the communicator from outside, e.g. the control plane saw a peer die or hang: every
  // blocked wait of this process throws CommunicationError (carrying `reason`) at once, later
  // calls throw. Safe from any thread; the first reason stays. It breaks what shares the
  // communicator's connections too (its new_group communicators, or the group it came from).
  virtual void abort(const std::string& reason) = 0;

  void all_reduce(Tensor tensor, ReduceOp op = ReduceOp::sum) { all_reduce_async(tensor, op)->wait(); }
  void all_gather(Tensor input, Tensor output) { all_gather_async(input, output)->wait(); }
  void reduce_scatter(Tensor input, Tensor output, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(input, output, op)->wait();
  }
  void broadcast(Tensor tensor, int root) { broadcast_async(tensor, root)->wait(); }
  void send(Tensor tensor, int peer, uint32_t tag = 0) { send_async(tensor, peer, tag)->wait(); }
  void recv(Tensor tensor, int peer, uint32_t tag = 0) { recv_async(tensor, peer, tag)->wait(); }
  // Returns once every rank has called it.
  void barrier();
};

}  // namespace libai::comm
