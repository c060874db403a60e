// A task pipeline declared by this program on the library's interface
// (models/pipelines/task_pipeline.h), as LiBai's BasePipeline subclasses are: texts in, each
// text's labels with their probabilities out, around a byte encoder (byte_encoder.h) that runs
// on one device or distributed, the pipeline unchanged.
//
//   pipelines::EagerRunner model(models::load_model("data/byte_encoder"));
//   TextClassification classify(model);
//   json answer = classify("what a fine day", {{"top_k", 1}});
//     // [{"label": "positive", "score": 0.41}]
//   json answers = classify({"one text", "another"});   // one answer per text
//
// Parameters: max_length (preprocess: bytes kept per text, at most the model's max_len),
// top_k (postprocess: the labels kept per text, best first; 0 or absent: all).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "byte_encoder.h"
#include "models/pipelines/task_pipeline.h"
#include "ops/ops.h"
#include "runtime/error.h"

namespace examples {

class TextClassification : public libai::models::pipelines::TaskPipeline {
 public:
  using json = nlohmann::json;
  using StepParameters = libai::models::pipelines::StepParameters;

  explicit TextClassification(libai::models::pipelines::ModelRunner& model)
      : TaskPipeline("text classification", model), config_(model.config()) {}

  // The ids of a text, as the model was trained on them: its UTF-8 bytes + 1 (0 pads).
  static std::vector<int64_t> encode(const std::string& text, int64_t max_length) {
    std::vector<int64_t> ids;
    for (unsigned char byte : text) ids.push_back(int64_t(byte) + 1);
    if (int64_t(ids.size()) > max_length) ids.resize(size_t(max_length));
    return ids;
  }

 protected:
  StepParameters parse_parameters(const json& kwargs) const override {
    return take_parameters(kwargs, {{"max_length", &StepParameters::preprocess},
                                    {"top_k", &StepParameters::postprocess}});
  }

  libai::models::TensorMap preprocess(const json& input, const json& parameters) override {
    using libai::Tensor;
    single_ = input.is_string();
    std::vector<std::string> texts;
    if (single_) texts.push_back(input.get<std::string>());
    else if (input.is_array())
      for (const auto& t : input) {
        LIBAI_CHECK(t.is_string(), name(), ": every input should be a text, got ", t.dump());
        texts.push_back(t.get<std::string>());
      }
    LIBAI_CHECK(!texts.empty(), name(), ": give a text or a list of texts, got ", input.dump());
    const int64_t max_length = parameters.value("max_length", config_.max_len);
    LIBAI_CHECK(max_length >= 1 && max_length <= config_.max_len, name(), ": max_length ",
                max_length, " should be in [1, ", config_.max_len, "]");
    std::vector<std::vector<int64_t>> rows;
    size_t longest = 1;
    for (const auto& t : texts) {
      rows.push_back(encode(t, max_length));
      longest = std::max(longest, rows.back().size());
    }
    Tensor ids = Tensor::zeros({int64_t(rows.size()), int64_t(longest)}, libai::DType::i64);
    Tensor mask = Tensor::zeros({int64_t(rows.size()), int64_t(longest)}, libai::DType::i64);
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t j = 0; j < rows[r].size(); ++j) {
        ids.data<int64_t>()[r * longest + j] = rows[r][j];
        mask.data<int64_t>()[r * longest + j] = 1;
      }
    return {{"input_ids", ids}, {"attention_mask", mask}};
  }

  json postprocess(const libai::models::TensorMap& outputs, const json& parameters) override {
    const libai::Tensor probs = libai::ops::softmax(outputs.at("logits"), -1);
    const int64_t classes = probs.size(1);
    const int64_t top_k = parameters.value("top_k", int64_t(0));
    LIBAI_CHECK(top_k >= 0, name(), ": top_k ", top_k, " should be at least 0");
    const auto values = probs.to_vector<double>();
    json answers = json::array();
    for (int64_t r = 0; r < probs.size(0); ++r) {
      std::vector<int64_t> order(static_cast<size_t>(classes));
      for (int64_t c = 0; c < classes; ++c) order[size_t(c)] = c;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return values[size_t(r * classes + a)] > values[size_t(r * classes + b)];
      });
      if (top_k > 0 && top_k < classes) order.resize(size_t(top_k));
      json answer = json::array();
      for (int64_t c : order)
        answer.push_back({{"label", config_.classes.at(size_t(c))},
                          {"score", values[size_t(r * classes + c)]}});
      answers.push_back(answer);
    }
    return single_ ? answers.at(0) : answers;
  }

 private:
  ByteEncoderConfig config_;
  bool single_ = false;
};

}  // namespace examples
