// DeviceMesh: the ranks of a job arranged as [dp, pp, tp], tp fastest (Megatron's and LiBai's
// order: a tensor-parallel group is tp consecutive ranks, so it stays inside a node), and the
// communicators of the three axes made from the world group.
//
//   comm::DeviceMesh mesh{.dp = 2, .pp = 1, .tp = 2};          // 4 ranks
//   auto coords = mesh.coordinates(3);                         // {dp 1, pp 0, tp 1}
//   comm::MeshGroups g = comm::make_mesh_groups(world, mesh);  // every rank calls it
//   g.tp->all_reduce(partial);   g.dp->all_reduce(gradient);
#pragma once

#include <memory>
#include <vector>

#include "runtime/comm/communicator.h"

namespace libai::comm {

struct MeshCoordinates {
  int dp = 0, pp = 0, tp = 0;
};

struct DeviceMesh {
  int dp = 1, pp = 1, tp = 1;

  int size() const { return dp * pp * tp; }
  MeshCoordinates coordinates(int rank) const;
  int rank_of(const MeshCoordinates& c) const;
  // The world ranks that share `rank`'s other coordinates along one axis, in axis order.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
};

struct MeshGroups {
  std::shared_ptr<Communicator> tp, pp, dp;  // this rank's groups (size-1 groups included)
  MeshCoordinates coordinates;
};

// Collective over `world` (every rank calls it in the same order): InvalidArgument when the
// mesh does not cover the world's size exactly.
MeshGroups make_mesh_groups(Communicator& world, const DeviceMesh& mesh);

}  // namespace libai::comm
