// A model spread over stage actors in this process, behind the task pipelines' ModelRunner
// (models/pipelines/task_pipeline.h): data-parallel replicas x pipeline stages x tensor-parallel
// ranks, each slot an actor with its own thread, loaded alone from the model's folder
// (model_stage_factory), so a task pipeline written for one device runs distributed unchanged.
//
//   actors::DistributedModel model("my_model/", {.sizes = {.dp = 1, .pp = 2, .tp = 2}});
//   TensorMap out = model.forward({{"input_ids", ids}, {"attention_mask", mask}});
//
// Each forward() cuts the batch into up to `groups` micro-batches of contiguous rows (every
// input's first dimension is the batch), sends them into the pipeline at once (groups are dealt
// round-robin to the replicas, so with groups >= dp x pp every stage has work) and puts the
// last stage's outputs back together along the first dimension. The stages run by arrival
// (Note [Stage programs] in actors/stage_actor.h), so forward() can be called any number of
// times, from one thread at a time; the destructor ends every group and joins the actors.
// The family needs inference stages (Family::make_stage; stages::make_forward_stage for a
// family whose parts run forward only).
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "actors/pipeline.h"
#include "models/hf_config.h"
#include "models/pipelines/task_pipeline.h"

namespace libai::actors {

struct DistributedModelOptions {
  LayoutSizes sizes;
  int groups = 0;             // micro-batches in flight; 0: dp x pp
  std::vector<int> stage_of;  // stage of each layer; empty: contiguous, as even as possible
                              // (earlier stages take the remainder)
  DType dtype = DType::f32;
};

class DistributedModel : public models::pipelines::ModelRunner {
 public:
  DistributedModel(const std::filesystem::path& folder, const DistributedModelOptions& options);
  ~DistributedModel() override;
  DistributedModel(const DistributedModel&) = delete;
  DistributedModel& operator=(const DistributedModel&) = delete;

  const models::HfConfig& config() const override { return config_; }
  models::TensorMap forward(const models::TensorMap& inputs) override;
  const PipelineLayout& layout() const { return layout_; }

 private:
  models::HfConfig config_;
  PipelineLayout layout_;
  std::unique_ptr<caf::actor_system_config> system_config_;
  std::unique_ptr<caf::actor_system> system_;
  std::unique_ptr<LocalPipeline> pipeline_;
  std::vector<int> next_step_;  // per group
};

// The stage of each of `num_layers` layers cut into `stages` contiguous runs, as even as
// possible, earlier stages taking the remainder. InvalidArgument when stages > num_layers.
std::vector<int> even_stage_of(int num_layers, int stages);

}  // namespace libai::actors
