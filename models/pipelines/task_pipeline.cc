#include "models/pipelines/task_pipeline.h"

#include "runtime/autograd.h"
#include "runtime/error.h"

namespace libai::models::pipelines {

EagerRunner::EagerRunner(std::unique_ptr<Model> model)
    : owned_(std::move(model)), model_(owned_.get()) {
  LIBAI_CHECK(model_ != nullptr, "EagerRunner: no model");
}

EagerRunner::EagerRunner(Model& model) : model_(&model) {}

TensorMap EagerRunner::forward(const TensorMap& inputs) {
  autograd::NoGradGuard no_grad;
  return model_->forward(inputs);
}

nlohmann::json TaskPipeline::operator()(const nlohmann::json& input, const nlohmann::json& kwargs) {
  LIBAI_CHECK(kwargs.is_object(), name_, ": the parameters should be a JSON object, got ",
              kwargs.dump());
  const StepParameters parameters = parse_parameters(kwargs);
  const TensorMap model_inputs = preprocess(input, parameters.preprocess);
  const TensorMap model_outputs = forward(model_inputs, parameters.forward);
  return postprocess(model_outputs, parameters.postprocess);
}

TensorMap TaskPipeline::forward(const TensorMap& model_inputs, const nlohmann::json&) {
  return model_.forward(model_inputs);
}

StepParameters TaskPipeline::take_parameters(
    const nlohmann::json& kwargs,
    const std::vector<std::pair<std::string, nlohmann::json StepParameters::*>>& keys) const {
  StepParameters out;
  for (const auto& [key, value] : kwargs.items()) {
    bool taken = false;
    for (const auto& [known, step] : keys)
      if (known == key) {
        (out.*step)[key] = value;
        taken = true;
      }
    if (!taken) {
      std::string known;
      for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k.first;
      LIBAI_CHECK(false, name_, ": unknown parameter \"", key, "\" (it takes ",
                  known.empty() ? "none" : known, ")");
    }
  }
  return out;
}

}  // namespace libai::models::pipelines
