#include "train/trainer.h"

#include <algorithm>
#include <mutex>
#include <optional>

#include "models/init.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/comm/mesh.h"
#include "runtime/comm/spmd.h"
#include "runtime/config/unimplemented.h"
#include "runtime/threads.h"
#include "train/pipeline_runner.h"
#include "train/step_runner.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;

// The model to train: a checkpoint or Hugging Face folder (fine-tuning), or a config.json
// initialised from scratch.
std::unique_ptr<models::Model> build_model(const config::Config& cfg,
                                           std::shared_ptr<comm::Communicator> tp, uint64_t seed) {
  LIBAI_CHECK_KIND(Unsupported, cfg.get_or<std::string>("model.quantize", "none") == "none",
                   "model.quantize: quantized training is not supported (quantized weights are "
                   "for inference: run and serve jobs, generate, serve --model)");
  const auto weights = cfg.get_or<std::string>("model.weights", "");
  if (!weights.empty()) return models::load_model(weights, {.tp = tp});
  auto model = models::create_model(training_model_config(cfg), {.tp = tp});
  models::init_parameters(*model, seed);
  return model;
}

bool is_classification(models::Task task) {
  return task == models::Task::sequence_classification ||
         task == models::Task::image_classification;
}

// One rank of the eager data x tensor parallel harness: train::TrainStep over the whole model
// (or its tensor-parallel shard).
class EagerRunner final : public StepRunner {
 public:
  EagerRunner(const config::Config& cfg, const TrainConfig& t, ParallelGroups groups)
      : groups_(std::move(groups)), schedule_(t.schedule) {
    model_ = build_model(cfg, groups_.tp, t.step.seed);
    model_->set_requires_grad(true);
    optimizer_ = make_optimizer(default_param_groups(*model_, t.groups), t.optimizer);
    step_ = std::make_unique<TrainStep>(*model_, *optimizer_, &schedule_, t.step, groups_);
  }

  const models::HfConfig& model_config() const override { return model_->config(); }
  models::Task task() const override { return model_->task(); }
  int64_t steps_done() const override { return step_->steps_done(); }

  StepResult run(const std::vector<std::vector<models::TensorMap>>& batches) override {
    LIBAI_ASSERT(batches.size() == 1, "an eager rank reads one replica's micro-batches");
    return step_->run(batches[0]);
  }

  std::map<std::string, double> evaluate(
      const std::vector<std::vector<models::TensorMap>>& batches) override {
    LIBAI_ASSERT(batches.size() == 1, "an eager rank reads one replica's micro-batches");
    autograd::NoGradGuard no_grad;
    double loss = 0, correct = 0, seen = 0;
    for (const auto& batch : batches[0]) {
      const LossOutput out = compute_loss(*model_, batch);
      loss += out.loss.item<double>();
      if (is_classification(model_->task()) && out.logits.defined()) {
        auto p = ops::argmax(out.logits, -1).to_vector<int64_t>();
        auto l = batch.at("labels").to_vector<int64_t>();
        for (size_t i = 0; i < p.size(); ++i) correct += p[i] == l[i];
        seen += double(p.size());
      }
    }
    return eval_metrics(model_->task(), loss, int64_t(batches[0].size()), correct, seen,
                        groups_.dp);
  }

  void save(const fs::path& output_dir, const std::string& name, const TrainingProgress& progress,
            int max_to_keep) override {
    save_checkpoint(output_dir, name, *model_, *optimizer_, step_->scaler(), progress, max_to_keep,
                    {.schedule = &schedule_, .groups = groups_});
  }

  TrainingProgress load(const fs::path& folder) override {
    TrainingProgress progress = load_checkpoint(folder, *model_, *optimizer_, step_->scaler());
    step_->set_steps_done(progress.iteration);
    return progress;
  }

 private:
  ParallelGroups groups_;
  LrScheduler schedule_;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<TrainStep> step_;
};

// One rank's loop. Rank 0 (of the world) writes the metrics and reports the result.
void run_rank(const config::Config& cfg, const TrainerFlags& flags, int dp, int tp,
              comm::Communicator* world, TrainResult& result) {
  ParallelGroups groups;
  LoopRole role{.data_parallel_size = dp};
  if (world) {
    const comm::DeviceMesh mesh{.dp = dp, .pp = 1, .tp = tp};
    auto mesh_groups = comm::make_mesh_groups(*world, mesh);
    if (tp > 1) groups.tp = mesh_groups.tp;
    if (dp > 1) groups.dp = mesh_groups.dp;
    role.replicas = {mesh.coordinates(world->rank()).dp};
    role.writer = world->rank() == 0;
  }
  run_training_loop(
      cfg, flags, role,
      [&](const TrainConfig& t) { return std::make_unique<EagerRunner>(cfg, t, groups); }, result);
}

// One rank of the eager pipeline (pp > 1): every rank reads its replica's micro-batches.
void run_pipeline_rank(const config::Config& cfg, const TrainerFlags& flags,
                       const comm::DeviceMesh& mesh, comm::Communicator& world_ref,
                       const std::shared_ptr<PipelineProcessState>& shared, TrainResult& result) {
  std::shared_ptr<comm::Communicator> world(&world_ref, [](comm::Communicator*) {});
  const LoopRole role{.data_parallel_size = mesh.dp,
                      .replicas = {mesh.coordinates(world->rank()).dp},
                      .writer = world->rank() == 0};
  run_training_loop(
      cfg, flags, role,
      [&](const TrainConfig& t) { return make_pipeline_runner(cfg, t, world, mesh, shared); },
      result);
}

}  // namespace

TrainResult run_training(const config::Config& cfg, const TrainerFlags& flags) {
  config::check_implemented(cfg, config::Purpose::training);
  const fs::path output_dir = cfg.get_or<std::string>("train.output_dir", "./output");
  fs::create_directories(output_dir);
  config::write_resolved(cfg, output_dir.string());
  const int dp = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  const int tp = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  const int pp = cfg.get_or<int>("train.dist.pipeline_parallel_size", 1);
  TrainResult result;
  const int world = dp * pp * tp;
  std::vector<TrainResult> per_rank(static_cast<size_t>(world));
  // Note [Rank threads' budgets]: ranks on threads of this process each compute on their own
  // cpu device with cores / world threads (at least 1; ranks beyond the cores share devices),
  // so that their kernels and OpenBLAS calls never run more threads than the cores (on the
  // default device, every rank's regions would queue on one pool of all the cores).
  const int per_rank_threads = std::max(1, hardware_cores() / std::max(world, 1));
  const int devices = std::max(1, std::min(world, hardware_cores() / per_rank_threads));
  std::vector<std::pair<Device, int>> budgets;
  for (int d = 0; d < devices; ++d) budgets.push_back({Device::cpu(d), per_rank_threads});
  std::optional<ThreadBudgetScope> scope;
  if (world > 1) scope.emplace(budgets);
  auto on_own_device = [devices](int rank) {
    set_current_cpu_device(Device::cpu(rank % devices));
  };
  // ZeRO lives in the pipeline's stage step (train/zero.h): with one stage too.
  const bool zero = cfg.get_or<bool>("train.zero_optimization.enabled", false) &&
                    cfg.get_or<int>("train.zero_optimization.stage", 1) > 0;
  if (pp > 1 || zero) {
    const comm::DeviceMesh mesh{.dp = dp, .pp = pp, .tp = tp};
    auto shared = make_pipeline_process_state();
    comm::run_spmd_threads(world, [&](comm::Communicator& comm) {
      on_own_device(comm.rank());
      run_pipeline_rank(cfg, flags, mesh, comm, shared,
                        comm.rank() == 0 ? result : per_rank[size_t(comm.rank())]);
    });
  } else if (world == 1) {
    run_rank(cfg, flags, dp, tp, nullptr, result);
  } else {
    comm::run_spmd_threads(world, [&](comm::Communicator& comm) {
      on_own_device(comm.rank());
      run_rank(cfg, flags, dp, tp, &comm,
               comm.rank() == 0 ? result : per_rank[size_t(comm.rank())]);
    });
  }
  scope.reset();
  return result;
}

}  // namespace libai::train
