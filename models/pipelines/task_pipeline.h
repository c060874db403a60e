// Task pipelines written by the library's users: input in, answer out, around a model that
// runs on one device or distributed. A pipeline declares four steps, as LiBai's BasePipeline
// subclasses do (docs/BRING_YOUR_OWN_MODEL.md):
//
//   parse_parameters  the call's keyword arguments, split among the three steps below
//   preprocess        the input (text, numbers, a file name: any JSON) -> the model's inputs
//   forward           the model's inputs -> its outputs, through a ModelRunner
//   postprocess       the model's outputs -> the answer (JSON)
//
//   class Sentiment : public pipelines::TaskPipeline { ... };      // the four steps
//   pipelines::EagerRunner model(models::load_model("my_model/"));  // one device
//   Sentiment pipeline(model);
//   json answer = pipeline("a fine day", {{"top_k", 2}});
//   actors::DistributedModel spread("my_model/", {.sizes = {.dp = 1, .pp = 2, .tp = 2}});
//   Sentiment distributed(spread);                                  // the same steps, 4 devices
//
// The pipeline never knows how its model runs: a ModelRunner takes a batch of model inputs
// and returns the whole model's outputs, on one device (EagerRunner) or through pipeline
// stages, tensor-parallel ranks and data-parallel replicas (actors::DistributedModel in
// actors/jobs/distributed_model.h, which needs the family's Family::make_stage). Both run without
// autograd.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"

namespace libai::models::pipelines {

// What a task pipeline's forward runs: a whole model, however it is spread.
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const HfConfig& config() const = 0;
  // One batch through the whole model: inputs and outputs under the names its Model::forward
  // uses. Distributed runners return the last part's outputs (Note [Model parts]: the per-layer
  // "hidden_states.{i}" of a whole model are not among them).
  virtual TensorMap forward(const TensorMap& inputs) = 0;
};

// A whole model in this thread, on its device.
class EagerRunner : public ModelRunner {
 public:
  explicit EagerRunner(std::unique_ptr<Model> model);
  explicit EagerRunner(Model& model);  // not owned: must outlive the runner
  const HfConfig& config() const override { return model_->config(); }
  TensorMap forward(const TensorMap& inputs) override;
  Model& model() { return *model_; }

 private:
  std::unique_ptr<Model> owned_;
  Model* model_;
};

// The parameters of one call, as parse_parameters splits them.
struct StepParameters {
  nlohmann::json preprocess = nlohmann::json::object();
  nlohmann::json forward = nlohmann::json::object();
  nlohmann::json postprocess = nlohmann::json::object();
};

class TaskPipeline {
 public:
  // `model` must outlive the pipeline; `name` is used in error messages.
  TaskPipeline(std::string name, ModelRunner& model) : name_(std::move(name)), model_(model) {}
  virtual ~TaskPipeline() = default;
  TaskPipeline(const TaskPipeline&) = delete;
  TaskPipeline& operator=(const TaskPipeline&) = delete;

  // parse_parameters(kwargs), then preprocess, forward and postprocess. `kwargs` must be a
  // JSON object (InvalidArgument otherwise).
  nlohmann::json operator()(const nlohmann::json& input,
                            const nlohmann::json& kwargs = nlohmann::json::object());

  const std::string& name() const { return name_; }
  ModelRunner& model() { return model_; }

 protected:
  // Every key of `kwargs` must go to some step: a key no step takes is an InvalidArgument
  // (take_parameters below does that).
  virtual StepParameters parse_parameters(const nlohmann::json& kwargs) const = 0;
  virtual TensorMap preprocess(const nlohmann::json& input, const nlohmann::json& parameters) = 0;
  // The default runs the model on the inputs as they are.
  virtual TensorMap forward(const TensorMap& model_inputs, const nlohmann::json& parameters);
  virtual nlohmann::json postprocess(const TensorMap& model_outputs,
                                     const nlohmann::json& parameters) = 0;

  // For parse_parameters: each key of `kwargs` goes to the step listed with it; InvalidArgument
  // naming the pipeline, the key and the known keys for a key not listed.
  StepParameters take_parameters(
      const nlohmann::json& kwargs,
      const std::vector<std::pair<std::string, nlohmann::json StepParameters::*>>& keys) const;

 private:
  std::string name_;
  ModelRunner& model_;
};

}  // namespace libai::models::pipelines
