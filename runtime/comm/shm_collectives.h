// Internal to the shm communicator: one collective in flight on the operations thread, the
// header agreement that opens it, and the algorithms (Note [Shm collectives] in
// shm_collectives.cc).
//
//   Collective c(world, group, CollectiveOp::all_reduce);
//   c.agree(header);                          // first barrier: every rank's op, dtype, count
//   run_all_reduce(c, tensor, ReduceOp::sum); // moves the data (more barriers)
//   c.barrier();                              // nobody touches another rank's memory any more
#pragma once

#include <string>
#include <vector>

#include "runtime/comm/shm_world.h"

namespace libai::comm::shm {

class Collective {
 public:
  Collective(ShmWorld& world, GroupView& group, CollectiveOp op);

  int rank() const { return group_.rank; }
  int size() const { return group_.size(); }
  // "shm all_reduce #7 on rank 1 of 4 (group 2 of world ranks [1, 3])": the errors' prefix.
  std::string what() const;
  // Publishes this rank's header and waits for every member's. Throws CommunicationError
  // naming each rank's op, dtype and count when they differ.
  const std::vector<CollectiveHeader>& agree(const CollectiveHeader& mine);
  const CollectiveHeader& header(int group_rank) const { return headers_[std::size_t(group_rank)]; }
  void barrier();

  bool cross_memory_attach() const { return world_.cross_memory_attach(); }
  const ProcessId& process(int group_rank) const;
  // Copies to or from group rank q's memory (cross-memory attach). When it fails because q
  // failed first and went away, the error names q's own reason rather than the missing pid.
  void read_from(int q, void* local, std::uint64_t remote, std::size_t bytes);
  void write_to(int q, const void* local, std::uint64_t remote, std::size_t bytes);
  std::uint8_t* staging(int group_rank, int half);

 private:
  ShmWorld& world_;
  GroupView& group_;
  CollectiveOp op_;
  std::uint32_t sequence_;
  std::vector<CollectiveHeader> headers_;
};

void run_all_reduce(Collective& c, const Tensor& tensor, ReduceOp op);
void run_all_gather(Collective& c, const Tensor& input, const Tensor& output);
void run_reduce_scatter(Collective& c, const Tensor& input, const Tensor& output, ReduceOp op);
void run_broadcast(Collective& c, const Tensor& tensor, int root);

}  // namespace libai::comm::shm
