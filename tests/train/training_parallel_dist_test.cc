// Training across processes: tensor- and data-parallel ranks as separate processes over UCX on
// loopback (run_spmd_processes), against the torch references of
// tools/make_training_fixtures.py (so against one device): every step's loss and gradient
// norm within 1e-5. Each child writes its figures to a file; the parent compares.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "runtime/comm/mesh.h"
#include "runtime/comm/spmd.h"
#include "tests/common/child_process.h"
#include "training_fixtures.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;
using testing::TrainingFixture;

void in_child(const std::function<void()>& fn) { ASSERT_EQ(testing::run_in_child(fn), 0); }

class TrainingProcesses : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(TrainingProcesses, LossesAndNormsEqualOneDevice) {
  const auto& [name, dp, tp] = GetParam();
  const TrainingFixture f(name);
  const int64_t steps = 8;
  const fs::path dir =
      fs::temp_directory_path() / ("libai_train_dist_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  in_child([&] {
    const comm::DeviceMesh mesh{.dp = dp, .pp = 1, .tp = tp};
    comm::run_spmd_processes(mesh.size(), [&](comm::Communicator& world) {
      auto groups = comm::make_mesh_groups(world, mesh);
      models::LoadOptions load;
      if (tp > 1) load.tp = groups.tp;
      auto model = models::load_model(f.folder, load);
      model->set_requires_grad(true);  // before the groups: frozen parameters are left out
      auto optimizer =
          make_optimizer(default_param_groups(*model, f.group_options()), f.optimizer_options());
      LrScheduler schedule(f.schedule_options());
      TrainStepOptions options = f.step_options();
      options.num_accumulation_steps = f.accumulation / dp;
      ParallelGroups parallel;
      if (tp > 1) parallel.tp = groups.tp;
      if (dp > 1) parallel.dp = groups.dp;
      TrainStep step(*model, *optimizer, &schedule, options, parallel);
      const int dp_rank = mesh.coordinates(world.rank()).dp;
      std::ofstream out(dir / ("rank" + std::to_string(world.rank())));
      out.precision(17);
      for (int64_t s = 0; s < steps; ++s) {
        std::vector<models::TensorMap> mine;
        for (int64_t k = 0; k < options.num_accumulation_steps; ++k)
          mine.push_back(f.micro_batch(s, k * dp + dp_rank));  // Note [Micro-batch order]
        StepResult r = step.run(mine);
        out << r.loss << " " << r.grad_norm << "\n";
      }
    });
  });
  for (int rank = 0; rank < dp * tp; ++rank) {
    std::ifstream in(dir / ("rank" + std::to_string(rank)));
    ASSERT_TRUE(in.good()) << "rank " << rank << " wrote nothing";
    for (int64_t s = 0; s < steps; ++s) {
      double loss = 0, norm = 0;
      ASSERT_TRUE(in >> loss >> norm) << "rank " << rank << " step " << s;
      EXPECT_NEAR(loss, double(f.step(s)["loss"]), 1e-5 * double(f.step(s)["loss"]))
          << "rank " << rank << " step " << s;
      EXPECT_NEAR(norm, double(f.step(s)["grad_norm"]), 1e-5 * double(f.step(s)["grad_norm"]))
          << "rank " << rank << " step " << s;
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Ucx, TrainingProcesses,
                         ::testing::Values(std::make_tuple("gpt2_adamw", 1, 2),
                                           std::make_tuple("gpt2_adamw", 2, 1),
                                           std::make_tuple("bert_pretraining_adamw", 2, 2)));

}  // namespace
}  // namespace libai::train
