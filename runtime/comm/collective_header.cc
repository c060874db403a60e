#include "runtime/comm/collective_header.h"

#include <algorithm>

#include "runtime/error.h"

namespace libai::comm::detail {
namespace {

bool same_collective(const CollectiveHeader& a, const CollectiveHeader& b) {
  return a.op == b.op && a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.root == b.root &&
         a.count == b.count && a.extra == b.extra;
}

std::string describe(const CollectiveHeader& h) {
  const auto op = CollectiveOp(h.op);
  if (op == CollectiveOp::new_group) return str_cat("new_group of ", h.count, " ranks");
  std::string out = collective_name(op);
  if (op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter)
    out += str_cat("(", reduce_op_name(ReduceOp(h.reduce_op)), ")");
  out += str_cat(" of ", h.count, " ", dtype_name(DType(h.dtype)), " elements");
  if (op == CollectiveOp::broadcast) out += str_cat(" from root ", h.root);
  return out;
}

std::uint64_t hash_ranks(const std::vector<int>& ranks) {
  std::uint64_t h = 1469598103934665603ull;
  for (int r : ranks) h = (h ^ std::uint64_t(r)) * 1099511628211ull;
  return h;
}

}  // namespace

const char* collective_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::all_gather: return "all_gather";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::broadcast: return "broadcast";
    case CollectiveOp::new_group: return "new_group";
  }
  return "collective";
}

CollectiveHeader header_of(CollectiveOp op, const Tensor& input, const Tensor& output,
                           ReduceOp reduce, int root) {
  CollectiveHeader h;
  h.op = std::uint8_t(op);
  h.dtype = std::uint8_t(input.dtype());
  h.reduce_op = std::uint8_t(reduce);
  h.root = root;
  h.count = input.numel();
  h.input = reinterpret_cast<std::uint64_t>(input.data_ptr());
  h.output = reinterpret_cast<std::uint64_t>(output.data_ptr());
  return h;
}

CollectiveHeader new_group_header(const std::vector<int>& ranks) {
  CollectiveHeader h;
  h.op = std::uint8_t(CollectiveOp::new_group);
  h.count = std::int64_t(ranks.size());
  h.extra = hash_ranks(ranks);
  return h;
}

void check_same_collective(const std::vector<CollectiveHeader>& headers, int rank,
                           const std::string& what) {
  const CollectiveHeader& mine = headers[std::size_t(rank)];
  const bool same = std::all_of(headers.begin(), headers.end(),
                                [&](const CollectiveHeader& h) { return same_collective(h, mine); });
  if (same) return;
  std::string ranks;
  for (std::size_t q = 0; q < headers.size(); ++q)
    ranks += str_cat(q == 0 ? "" : "; ", "rank ", q, ": ", describe(headers[q]));
  LIBAI_THROW(CommunicationError, what, ": the ranks called different collectives: ", ranks);
}

void set_world_view(GroupView& view, int rank, int size) {
  view.id = 0;
  view.rank = rank;
  view.world_ranks.clear();
  for (int r = 0; r < size; ++r) view.world_ranks.push_back(r);
}

bool set_subgroup_view(GroupView& view, const GroupView& parent, const std::vector<int>& ranks,
                       std::uint32_t id) {
  const auto at = std::find(ranks.begin(), ranks.end(), parent.rank);
  if (at == ranks.end()) return false;
  view.id = id;
  view.rank = int(at - ranks.begin());
  view.world_ranks.clear();
  for (int r : ranks) view.world_ranks.push_back(parent.world_ranks[std::size_t(r)]);
  return true;
}

std::string collective_what(const char* backend, CollectiveOp op, std::uint32_t sequence,
                            const GroupView& group) {
  std::string out = str_cat(backend, " ", collective_name(op), " #", sequence, " on rank ",
                            group.rank, " of ", group.size());
  if (group.id != 0)
    out += str_cat(" (group ", group.id, " of world ranks ", group.world_ranks, ")");
  return out;
}

}  // namespace libai::comm::detail
