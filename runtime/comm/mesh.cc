#include "runtime/comm/mesh.h"

#include "runtime/error.h"

namespace libai::comm {

MeshCoordinates DeviceMesh::coordinates(int rank) const {
  LIBAI_CHECK(rank >= 0 && rank < size(), "mesh: rank ", rank, " outside a mesh of ", size(), " ranks");
  return {rank / (pp * tp), (rank / tp) % pp, rank % tp};
}

int DeviceMesh::rank_of(const MeshCoordinates& c) const { return (c.dp * pp + c.pp) * tp + c.tp; }

std::vector<int> DeviceMesh::tp_group(int rank) const {
  MeshCoordinates c = coordinates(rank);
  std::vector<int> out;
  for (c.tp = 0; c.tp < tp; ++c.tp) out.push_back(rank_of(c));
  return out;
}

std::vector<int> DeviceMesh::pp_group(int rank) const {
  MeshCoordinates c = coordinates(rank);
  std::vector<int> out;
  for (c.pp = 0; c.pp < pp; ++c.pp) out.push_back(rank_of(c));
  return out;
}

std::vector<int> DeviceMesh::dp_group(int rank) const {
  MeshCoordinates c = coordinates(rank);
  std::vector<int> out;
  for (c.dp = 0; c.dp < dp; ++c.dp) out.push_back(rank_of(c));
  return out;
}

MeshGroups make_mesh_groups(Communicator& world, const DeviceMesh& mesh) {
  LIBAI_CHECK(mesh.dp >= 1 && mesh.pp >= 1 && mesh.tp >= 1, "mesh: sizes must be positive, got dp ",
              mesh.dp, " pp ", mesh.pp, " tp ", mesh.tp);
  LIBAI_CHECK(mesh.size() == world.size(), "mesh: data_parallel_size ", mesh.dp,
              " x pipeline_parallel_size ", mesh.pp, " x tensor_parallel_size ", mesh.tp, " = ",
              mesh.size(), " ranks, but the job has ", world.size());
  MeshGroups groups;
  groups.coordinates = mesh.coordinates(world.rank());
  // Every rank takes part in every new_group call, in the same order.
  auto make_axis = [&](auto group_of, std::shared_ptr<Communicator>& mine) {
    std::vector<bool> done(size_t(mesh.size()), false);
    for (int r = 0; r < mesh.size(); ++r) {
      if (done[r]) continue;
      std::vector<int> ranks = (mesh.*group_of)(r);
      for (int x : ranks) done[x] = true;
      auto group = world.new_group(ranks);
      if (group) mine = group;
    }
  };
  make_axis(&DeviceMesh::tp_group, groups.tp);
  make_axis(&DeviceMesh::pp_group, groups.pp);
  make_axis(&DeviceMesh::dp_group, groups.dp);
  return groups;
}

}  // namespace libai::comm
