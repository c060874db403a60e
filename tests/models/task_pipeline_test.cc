// The task pipeline interface (models/pipelines/task_pipeline.h): a pipeline of this test's own
// runs its four steps in order, each with the parameters parse_parameters gave it, around a
// BERT sequence classifier on one device, and answers what the model answers; unknown
// parameters and parameters that are not an object are refused naming them.
#include <gtest/gtest.h>

#include "models/pipelines/task_pipeline.h"
#include "parity_util.h"
#include "random_models.h"
#include "runtime/autograd.h"

namespace libai::models::pipelines {
namespace {

using json = nlohmann::json;

// Input: a list of token ids. Parameters: "repeat" (preprocess: the rows of the batch),
// "label" (postprocess: the class whose logit is answered), "note" (forward: kept).
class ClassLogit : public TaskPipeline {
 public:
  explicit ClassLogit(ModelRunner& model) : TaskPipeline("class logit", model) {}
  std::vector<std::string> calls;
  json forward_parameters;

 protected:
  StepParameters parse_parameters(const json& kwargs) const override {
    return take_parameters(kwargs, {{"repeat", &StepParameters::preprocess},
                                    {"note", &StepParameters::forward},
                                    {"label", &StepParameters::postprocess}});
  }
  TensorMap preprocess(const json& input, const json& parameters) override {
    calls.push_back("preprocess " + parameters.dump());
    const int64_t rows = parameters.value("repeat", int64_t(1)), n = int64_t(input.size());
    Tensor ids = Tensor::empty({rows, n}, DType::i64);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) ids.data<int64_t>()[r * n + j] = input[size_t(j)].get<int64_t>();
    return {{"input_ids", ids}};
  }
  TensorMap forward(const TensorMap& inputs, const json& parameters) override {
    calls.push_back("forward " + parameters.dump());
    return TaskPipeline::forward(inputs, parameters);
  }
  json postprocess(const TensorMap& outputs, const json& parameters) override {
    calls.push_back("postprocess " + parameters.dump());
    const Tensor& logits = outputs.at("logits");
    const int64_t label = parameters.value("label", int64_t(0));
    json rows = json::array();
    for (int64_t r = 0; r < logits.size(0); ++r)
      rows.push_back(logits.to_vector<double>()[size_t(r * logits.size(1) + label)]);
    return rows;
  }
};

std::filesystem::path classifier() {
  for (const auto& f : testing::families())
    if (f.name == "bert_cls") return testing::save_random_model(f, "task_" + std::to_string(::getpid()));
  throw std::runtime_error("no family bert_cls");
}

TEST(TaskPipeline, RunsItsStepsInOrderWithTheirParameters) {
  const auto folder = classifier();
  EagerRunner runner(load_model(folder));
  ClassLogit pipeline(runner);
  const json answer = pipeline(json{5, 9, 11, 3}, {{"label", 2}, {"repeat", 2}, {"note", "x"}});
  EXPECT_EQ(pipeline.calls, (std::vector<std::string>{"preprocess {\"repeat\":2}", "forward {\"note\":\"x\"}",
                                                      "postprocess {\"label\":2}"}));
  Tensor ids = Tensor::empty({1, 4}, DType::i64);
  for (int64_t j = 0; j < 4; ++j) ids.data<int64_t>()[j] = std::vector<int64_t>{5, 9, 11, 3}[size_t(j)];
  autograd::NoGradGuard no_grad;
  const double want = load_model(folder)->forward({{"input_ids", ids}}).at("logits").to_vector<double>()[2];
  ASSERT_EQ(answer.size(), 2u);
  EXPECT_NEAR(answer[0].get<double>(), want, 1e-6 * std::max(1.0, std::abs(want)));
  EXPECT_EQ(answer[0], answer[1]);
  EXPECT_EQ(&runner.config(), &runner.model().config());
}

TEST(TaskPipeline, UnknownParametersAreRefusedNamingThem) {
  const auto folder = classifier();
  EagerRunner runner(load_model(folder));
  ClassLogit pipeline(runner);
  EXPECT_NE(testing::invalid_argument_of([&] { pipeline(json{5, 9}, {{"top_p", 0.5}}); })
                .find("class logit: unknown parameter \"top_p\" (it takes repeat, note, label)"),
            std::string::npos);
  EXPECT_NE(testing::invalid_argument_of([&] { pipeline(json{5, 9}, json::array({1})); })
                .find("class logit: the parameters should be a JSON object, got [1]"),
            std::string::npos);
  EXPECT_TRUE(pipeline.calls.empty()) << "no step ran";
}

}  // namespace
}  // namespace libai::models::pipelines
