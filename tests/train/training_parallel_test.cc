// Training under tensor and data parallelism (ranks on threads, local communicators) against
// the torch references of tools/make_training_fixtures.py, and so against one device: every
// step's loss and gradient norm (clipping included) within 1e-5, with the micro-batches dealt
// out to data-parallel ranks as Note [Micro-batch order] in train/train_step.h says.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/comm/mesh.h"
#include "runtime/comm/spmd.h"
#include "training_fixtures.h"

namespace libai::train {
namespace {

using testing::TrainingFixture;

struct Layout {
  int dp = 1, tp = 1;
};

struct StepFigures {
  double loss = 0, grad_norm = 0;
};

// Every rank's figures for every step.
std::vector<std::vector<StepFigures>> train_with(const TrainingFixture& f, Layout layout,
                                                 int64_t steps) {
  const comm::DeviceMesh mesh{.dp = layout.dp, .pp = 1, .tp = layout.tp};
  std::vector<std::vector<StepFigures>> figures(size_t(mesh.size()));
  comm::run_spmd_threads(mesh.size(), [&](comm::Communicator& world) {
    auto groups = comm::make_mesh_groups(world, mesh);
    models::LoadOptions load;
    if (layout.tp > 1) load.tp = groups.tp;
    auto model = models::load_model(f.folder, load);
    model->set_requires_grad(true);  // before the groups: frozen parameters are left out
    auto optimizer =
        make_optimizer(default_param_groups(*model, f.group_options()), f.optimizer_options());
    LrScheduler schedule(f.schedule_options());
    TrainStepOptions options = f.step_options();
    options.num_accumulation_steps = f.accumulation / layout.dp;
    ParallelGroups parallel;
    if (layout.tp > 1) parallel.tp = groups.tp;
    if (layout.dp > 1) parallel.dp = groups.dp;
    TrainStep step(*model, *optimizer, &schedule, options, parallel);
    const int dp_rank = mesh.coordinates(world.rank()).dp;
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<models::TensorMap> mine;
      for (int64_t k = 0; k < options.num_accumulation_steps; ++k)
        mine.push_back(f.micro_batch(s, k * layout.dp + dp_rank));  // Note [Micro-batch order]
      StepResult r = step.run(mine);
      figures[size_t(world.rank())].push_back({r.loss, r.grad_norm});
    }
  });
  return figures;
}

class TrainingLayouts : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(TrainingLayouts, LossesAndNormsEqualOneDevice) {
  const auto& [name, dp, tp] = GetParam();
  const TrainingFixture f(name);
  const int64_t steps = 12;
  auto figures = train_with(f, {.dp = dp, .tp = tp}, steps);
  double worst = 0;
  for (size_t rank = 0; rank < figures.size(); ++rank)
    for (int64_t s = 0; s < steps; ++s) {
      const auto& expected = f.step(s);
      const auto& got = figures[rank][size_t(s)];
      const double loss_error =
          std::abs(got.loss - double(expected["loss"])) / double(expected["loss"]);
      const double norm_error =
          std::abs(got.grad_norm - double(expected["grad_norm"])) / double(expected["grad_norm"]);
      worst = std::max({worst, loss_error, norm_error});
      EXPECT_LT(loss_error, 1e-5) << "rank " << rank << " step " << s;
      EXPECT_LT(norm_error, 1e-5) << "rank " << rank << " step " << s;
    }
  std::printf("%s dp %d tp %d: worst relative error %.2e\n", name.c_str(), dp, tp, worst);
}

INSTANTIATE_TEST_SUITE_P(Threads, TrainingLayouts,
                         ::testing::Values(std::make_tuple("gpt2_adamw", 1, 2),
                                           std::make_tuple("gpt2_adamw", 2, 1),
                                           std::make_tuple("gpt2_adamw", 2, 2),
                                           std::make_tuple("gpt2_adamw", 4, 1),
                                           std::make_tuple("gpt2_adamw", 1, 4),
                                           std::make_tuple("bert_pretraining_adamw", 1, 2),
                                           std::make_tuple("bert_pretraining_adamw", 2, 1),
                                           std::make_tuple("t5_adamw", 1, 2),
                                           std::make_tuple("vit_adamw", 2, 2),
                                           std::make_tuple("swin_adamw", 2, 1),
                                           std::make_tuple("swin_adamw", 1, 2),
                                           std::make_tuple("swin_adamw", 2, 2)));

}  // namespace
}  // namespace libai::train
