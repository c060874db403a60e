// Data parallelism, alone and with tensor parallelism: the gradients reduced by
// GradientReducer equal the single-device gradients of the whole batch, and buckets are
// launched while backward is still running.
#include <gtest/gtest.h>

#include "models/parallel/data_parallel.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "random_models.h"
#include "runtime/autograd.h"
#include "runtime/comm/mesh.h"
#include "runtime/comm/spmd.h"

namespace libai::models {
namespace {

using testing::families;

// Parameter gradients of loss = sum(logits * w) / batch for rows [first, first + count).
std::map<std::string, Tensor> gradients(Model& model, const Tensor& ids, const Tensor& w, int64_t first,
                                        int64_t count, GradientReducer* reducer) {
  model.set_requires_grad(true);
  Tensor mine = ops::narrow(ids, 0, first, count);
  Tensor logits = model.forward({{"input_ids", mine}}).at("logits");
  autograd::backward(ops::sum_all(logits * ops::narrow(w, 0, first, count)) * (1.0 / double(count)));
  if (reducer) reducer->finish();
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : model.named_parameters()) out[name] = t->grad();
  return out;
}

struct Layout {
  int dp, tp;
};

class DataParallel : public ::testing::TestWithParam<Layout> {};

TEST_P(DataParallel, GradientsEqualOneDeviceOnTheWholeBatch) {
  const Layout layout = GetParam();
  const auto family = families()[0];  // gpt2
  const auto dir = testing::save_random_model(family);
  const int64_t batch = 4, seq = 6;
  Tensor ids = testing::ids_tensor({batch, seq}, 5, 37);
  Tensor w = testing::normal_tensor({batch, seq, 37}, 6);
  auto single = load_model(dir);
  auto expected = gradients(*single, ids, w, 0, batch, nullptr);

  const comm::DeviceMesh mesh{.dp = layout.dp, .pp = 1, .tp = layout.tp};
  std::vector<std::map<std::string, Tensor>> got(mesh.size());
  std::vector<std::map<std::string, ParameterInfo>> infos(mesh.size());
  std::vector<int64_t> early(mesh.size());
  comm::run_spmd_threads(mesh.size(), [&](comm::Communicator& world) {
    auto groups = comm::make_mesh_groups(world, mesh);
    auto model = load_model(dir, {.tp = groups.tp});
    GradientReducer reducer(*model, groups.dp, {.bucket_bytes = 4096});
    const int64_t per_rank = batch / mesh.dp;
    got[world.rank()] = gradients(*model, ids, w, groups.coordinates.dp * per_rank, per_rank, &reducer);
    for (auto& info : model->parameter_infos()) infos[world.rank()][info.name] = info;
    early[world.rank()] = reducer.launched_before_finish();
    EXPECT_GT(reducer.bucket_count(), 2);
  });
  for (int rank = 0; rank < mesh.size(); ++rank) {
    EXPECT_GT(early[rank], 0) << "no bucket was reduced during backward on rank " << rank;
    for (const auto& [name, grad] : expected) {
      const auto& info = infos[rank].at(name);
      Tensor want = grad;
      if (info.split_dim >= 0 && info.tp_size > 1) {
        const int d = info.split_dim;
        const int64_t part = got[rank].at(name).size(d), start = info.tp_rank * part;
        const int64_t length = std::min(part, info.logical_shape[d] - start);
        Tensor padded = Tensor::zeros(got[rank].at(name).shape());
        ops::narrow(padded, d, 0, length).copy_from(ops::narrow(grad, d, start, length));
        want = padded;
      }
      EXPECT_LE(testing::relative_error(got[rank].at(name), want), 1e-5) << name << " on rank " << rank;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataParallel,
                         ::testing::Values(Layout{2, 1}, Layout{4, 1}, Layout{2, 2}),
                         [](const auto& info) {
                           return "dp" + std::to_string(info.param.dp) + "_tp" + std::to_string(info.param.tp);
                         });

TEST(DeviceMesh, CoordinatesAndGroups) {
  comm::DeviceMesh mesh{.dp = 2, .pp = 3, .tp = 2};
  EXPECT_EQ(mesh.size(), 12);
  for (int r = 0; r < 12; ++r) EXPECT_EQ(mesh.rank_of(mesh.coordinates(r)), r);
  EXPECT_EQ(mesh.tp_group(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh.pp_group(5), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(mesh.dp_group(5), (std::vector<int>{5, 11}));
  EXPECT_THROW(comm::run_spmd_threads(3, [&](comm::Communicator& world) {
                 comm::make_mesh_groups(world, {.dp = 2, .pp = 1, .tp = 2});
               }),
               Error);
}

}  // namespace
}  // namespace libai::models
