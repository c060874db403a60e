// Internal to the process-group backends (ucx and shm): what a collective's ranks exchange
// before it moves any data, so that ranks that called different collectives fail alike, with
// the same message, whichever backend carries them; and a group as the backends see it.
//
//   CollectiveHeader mine = header_of(CollectiveOp::all_reduce, t, t, ReduceOp::sum, -1);
//   ... every rank's header arrives in `headers` (by group rank) ...
//   check_same_collective(headers, group.rank, what);  // throws naming each rank's call
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"

namespace libai::comm::detail {

enum class CollectiveOp : std::uint8_t {
  all_reduce = 1,
  all_gather,
  reduce_scatter,
  broadcast,
  new_group
};
const char* collective_name(CollectiveOp op);

// What every rank of a collective must agree on, checked before any received data is used;
// plus where its tensors are (the shm backend's cross-memory attach reads them; ucx ignores
// them, and so does the check).
struct CollectiveHeader {
  std::uint8_t op = 0, dtype = 0, reduce_op = 0, pad = 0;
  std::int32_t root = -1;
  std::int64_t count = 0;      // elements of this rank's input
  std::uint64_t extra = 0;     // new_group: a hash of the rank list
  std::uint64_t proposal = 0;  // new_group: this rank's first free group id (may differ)
  std::uint64_t input = 0, output = 0;  // addresses in the owner's process
};

CollectiveHeader header_of(CollectiveOp op, const Tensor& input, const Tensor& output,
                           ReduceOp reduce, int root);
// new_group(ranks): the count and a hash of the list; the proposal is the caller's.
CollectiveHeader new_group_header(const std::vector<int>& ranks);

// Throws CommunicationError "<what>: the ranks called different collectives: rank 0: ...;
// rank 1: ..." unless every header matches headers[rank].
void check_same_collective(const std::vector<CollectiveHeader>& headers, int rank,
                           const std::string& what);

// A group as the transport sees it: its id and its members' world ranks.
struct GroupView {
  std::uint32_t id = 0;
  std::vector<int> world_ranks;  // group rank -> world rank
  int rank = 0;                  // this process's group rank
  int size() const { return int(world_ranks.size()); }
};

// The world: group 0 of ranks 0..size-1.
void set_world_view(GroupView& view, int rank, int size);
// The view of sub-group `id` made of `parent`'s group ranks `ranks` (sorted); false when this
// process is not among them.
bool set_subgroup_view(GroupView& view, const GroupView& parent, const std::vector<int>& ranks,
                       std::uint32_t id);

// "ucx all_reduce #7 on rank 1 of 4 (group 2 of world ranks [1, 3])": a collective's errors'
// prefix.
std::string collective_what(const char* backend, CollectiveOp op, std::uint32_t sequence,
                            const GroupView& group);

}  // namespace libai::comm::detail
