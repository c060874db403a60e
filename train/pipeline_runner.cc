#include "train/pipeline_runner.h"

#include <mutex>
#include <set>

#include "models/init.h"
#include "models/stages/stage.h"
#include "train/pipeline_eager.h"
#include "train/checkpoint/sharded.h"

namespace libai::train {

struct PipelineProcessState {
  std::mutex mutex;
  std::map<int, CheckpointTensors> by_stage;  // (dp 0, tp 0) rank of each stage
};

std::shared_ptr<PipelineProcessState> make_pipeline_process_state() {
  return std::make_shared<PipelineProcessState>();
}

namespace {

namespace fs = std::filesystem;

class PipelineRunner final : public StepRunner {
 public:
  PipelineRunner(const config::Config& cfg, const TrainConfig& t,
                 std::shared_ptr<comm::Communicator> world, const comm::DeviceMesh& mesh,
                 std::shared_ptr<PipelineProcessState> shared)
      : shared_(std::move(shared)), world_(world), schedule_(t.schedule) {
    const int chunks = cfg.get_or<int>("train.dist.virtual_pipeline_size", 1);
    std::string schedule_name = cfg.get_or<std::string>("train.dist.pipeline_schedule", "1f1b");
    setup_ = make_pipeline_rank(world, mesh);
    layout_ = {.pp = mesh.pp,
               .stage = setup_.coordinates.pp,
               .num_chunks = chunks,
               .dp = mesh.dp,
               .dp_rank = setup_.coordinates.dp,
               .micro_batch_size = t.batch.micro};
    const models::HfConfig config = training_model_config(cfg);
    const auto specs =
        virtual_stage_parts(models::stages::pipeline_num_layers(config), mesh.pp * chunks);
    const auto weights = cfg.get_or<std::string>("model.weights", "");
    for (int c = 0; c < chunks; ++c) {
      const models::StageSpec& spec = specs[size_t(c * mesh.pp + layout_.stage)];
      std::unique_ptr<models::Model> part;
      if (!weights.empty()) {
        part = models::load_model(weights, {.tp = setup_.groups.tp, .part = spec});
      } else {
        part = models::create_model(config, {.tp = setup_.groups.tp}, spec);
        models::init_parameters(*part, t.step.seed);  // keyed by name: the whole model's values
      }
      part->set_requires_grad(true);
      parts_.push_back(part.get());
      owned_.push_back(std::move(part));
    }
    optimizer_ = make_optimizer(stage_param_groups(parts_, t.groups), t.optimizer);
    step_ = std::make_unique<StageStep>(parts_, *optimizer_, &schedule_, t.step, layout_,
                                        setup_.groups);
    program_ = pipeline_program(schedule_name, mesh.pp, int(t.batch.accumulation), chunks);
    rank_ = std::make_unique<EagerPipelineRank>(*step_, program_[size_t(layout_.stage)], layout_,
                                                setup_.groups.pp);
  }

  const models::HfConfig& model_config() const override { return parts_[0]->config(); }
  models::Task task() const override { return parts_[0]->task(); }
  int64_t steps_done() const override { return step_->steps_done(); }

  StepResult run(const std::vector<std::vector<models::TensorMap>>& batches) override {
    LIBAI_ASSERT(batches.size() == 1, "a pipeline rank reads one replica's micro-batches");
    return rank_->run(batches[0]);
  }

  std::map<std::string, double> evaluate(
      const std::vector<std::vector<models::TensorMap>>& batches) override {
    LIBAI_ASSERT(batches.size() == 1, "a pipeline rank reads one replica's micro-batches");
    const WholeParameters whole(step_->zero());  // ZeRO-3: shards between uses
    const PipelineEvalSums sums = evaluate_pipeline(parts_, layout_, setup_.groups.pp, batches[0]);
    // The last stage's replicas average (eval_metrics); its (dp 0, tp 0) rank tells everyone.
    std::vector<double> values(3, 0.0);  // loss, accuracy (or -1), perplexity (or -1)
    if (layout_.stage == layout_.pp - 1) {
      auto m =
          eval_metrics(task(), sums.loss, sums.batches, sums.correct, sums.seen, setup_.groups.dp);
      values = {m.at("eval/loss"), m.contains("eval/accuracy") ? m.at("eval/accuracy") : -1.0,
                m.contains("eval/perplexity") ? m.at("eval/perplexity") : -1.0};
    }
    Tensor t = Tensor::from_vector<double>(values, {3});
    world_->broadcast(t, root_of_last_stage());
    values = t.to_vector<double>();
    std::map<std::string, double> out{{"eval/loss", values[0]}};
    if (values[1] >= 0) out["eval/accuracy"] = values[1];
    if (values[2] >= 0) out["eval/perplexity"] = values[2];
    return out;
  }

  // Note [Checkpoints of pipeline parts]: the whole model, written by world rank 0; under ZeRO
  // the sharded format (every rank writes what it owns: Note [Sharded checkpoint layout]).
  void save(const fs::path& output_dir, const std::string& name, const TrainingProgress& progress,
            int max_to_keep) override {
    if (ZeroShards* zero = step_->zero()) {
      const WholeParameters whole(zero);
      const std::vector<OwnedSlice> slices = step_->owned_slices();
      const ShardedLayout saved{.dp = layout_.dp,
                                .tp = setup_.groups.tp ? setup_.groups.tp->size() : 1,
                                .pp = layout_.pp,
                                .virtual_stages = layout_.num_chunks,
                                .zero_stage = zero->stage()};
      save_sharded_checkpoint(output_dir, name, slices, world_.get(), saved, *parts_[0],
                              *optimizer_, step_->optimizer_steps(), step_->scaler(), progress,
                              max_to_keep, {.schedule = &schedule_},
                              /*whole_weights=*/!is_numbered_checkpoint(name));
      return;
    }
    CheckpointTensors mine = gather_checkpoint_tensors(parts_, *optimizer_, setup_.groups.tp.get());
    const bool contributes = layout_.dp_rank == 0 && setup_.coordinates.tp == 0;
    if (contributes) {
      std::lock_guard lock(shared_->mutex);
      shared_->by_stage[layout_.stage] = std::move(mine);
    }
    world_->barrier();
    if (world_->rank() == 0) {
      CheckpointTensors merged;
      std::set<std::string> weights, state;
      {
        std::lock_guard lock(shared_->mutex);
        for (auto& [stage, tensors] : shared_->by_stage) {
          for (auto& [key, t] : tensors.weights)
            if (weights.insert(key).second) merged.weights.emplace_back(key, t);
          for (auto& [key, t] : tensors.state)
            if (state.insert(key).second) merged.state.emplace_back(key, t);
        }
        shared_->by_stage.clear();
      }
      write_checkpoint(output_dir, name, *parts_[0], std::move(merged), *optimizer_,
                       step_->scaler(), progress, max_to_keep, {.schedule = &schedule_});
    }
    world_->barrier();
  }

  TrainingProgress load(const fs::path& folder) override {
    return load_stage_checkpoint(CheckpointReader::open(folder), parts_, *step_);
  }

 private:
  int root_of_last_stage() const {
    // DeviceMesh order [dp, pp, tp]: (dp 0, last stage, tp 0).
    return (layout_.pp - 1) * (setup_.groups.tp ? setup_.groups.tp->size() : 1);
  }

  std::shared_ptr<PipelineProcessState> shared_;
  std::shared_ptr<comm::Communicator> world_;
  PipelineRankSetup setup_;
  StageLayout layout_;
  LrScheduler schedule_;
  std::vector<std::unique_ptr<models::Model>> owned_;
  std::vector<models::Model*> parts_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<StageStep> step_;
  schedule::PipelineProgram program_;
  std::unique_ptr<EagerPipelineRank> rank_;
};

}  // namespace

std::unique_ptr<StepRunner> make_pipeline_runner(const config::Config& cfg, const TrainConfig& t,
                                                 std::shared_ptr<comm::Communicator> world,
                                                 const comm::DeviceMesh& mesh,
                                                 std::shared_ptr<PipelineProcessState> shared) {
  return std::make_unique<PipelineRunner>(cfg, t, std::move(world), mesh, std::move(shared));
}

}  // namespace libai::train
