// Internal to the ucx communicator: one collective in flight over a UcxWorld, the header
// exchange that checks every rank agrees, and the algorithms (Note [UCX collectives] in
// ucx_collectives.cc).
//
//   Collective c(world, group, sequence, CollectiveOp::all_reduce, &bytes_sent);
//   c.announce(header);                       // every rank's op, dtype, count: no waiting
//   run_all_reduce(c, tensor, ReduceOp::sum); // its first wait checks the headers agree
//   c.agree();                                // (for algorithms that had nothing to wait for)
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/collective_header.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/ucx_world.h"

namespace libai::comm::detail {

// Below this many bytes per rank a collective moves the data directly between all ranks
// (one latency); from it on, the ring (bandwidth-optimal, 2(n-1) latencies for all-reduce).
constexpr std::size_t kSmallMessageBytes = 64u << 10;
// The ring broadcast forwards the tensor in pieces of this size, so the ranks down the ring
// work at once.
constexpr std::size_t kPipelineChunkBytes = 1u << 20;

class Collective {
 public:
  Collective(UcxWorld& world, const GroupView& group, std::uint32_t sequence, CollectiveOp op,
             std::int64_t* bytes_sent);

  int rank() const { return group_.rank; }
  int size() const { return group_.size(); }
  CollectiveOp op() const { return op_; }
  // "ucx all_reduce #7 on rank 1 of 4 (group 0)": the prefix of every error message.
  std::string what() const;

  // Sends this rank's header to every rank and receives theirs without waiting, so that the
  // algorithm's first transfers (a small collective's only ones) travel with the headers.
  void announce(const CollectiveHeader& mine);
  // Waits for the headers (the first wait of the algorithm calls it) and returns them by group
  // rank. Throws CommunicationError naming each rank's op, dtype and count when they differ.
  const std::vector<CollectiveHeader>& agree();

  // Non-blocking; `step` keeps the messages of one collective apart. Ranks are group ranks.
  TransferPtr send(int to, std::uint32_t step, const void* data, std::size_t bytes,
                   std::shared_ptr<const void> owner);
  TransferPtr recv(int from, std::uint32_t step, void* data, std::size_t bytes,
                   std::shared_ptr<const void> owner);
  // Waits for `transfer`, or for every transfer posted so far; each wait has the timeout.
  void wait(const TransferPtr& transfer);
  void wait_all();

 private:
  UcxWorld& world_;
  const GroupView& group_;
  std::uint32_t sequence_;
  CollectiveOp op_;
  std::int64_t* bytes_sent_;
  std::vector<TransferPtr> pending_;
  std::shared_ptr<std::vector<CollectiveHeader>> headers_;
  std::vector<TransferPtr> header_transfers_;
  bool agreed_ = false;
};

void run_all_reduce(Collective& c, const Tensor& tensor, ReduceOp op);
void run_all_gather(Collective& c, const Tensor& input, const Tensor& output);
void run_reduce_scatter(Collective& c, const Tensor& input, const Tensor& output, ReduceOp op);
void run_broadcast(Collective& c, const Tensor& tensor, int root);

}  // namespace libai::comm::detail
