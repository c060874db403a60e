// compute_loss against transformers (tools/make_loss_fixtures.py): the loss of every task's head
// and the gradients of a few named parameters (tensor parallelism: loss_tensor_parallel_test.cc);
// and BertForPreTraining's forward against its reference outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../models/parity_util.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"
#include "tests/common/shards.h"
#include "train/loss.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;
using models::TensorMap;
using testing::relative_error;

fs::path losses_dir() { return fs::path(LIBAI_SOURCE_DIR) / "tests" / "data" / "losses"; }

struct LossCase {
  nlohmann::json info;
  TensorMap batch;
  Tensor loss;
  std::map<std::string, Tensor> grads;  // by our parameter name
};

LossCase load_case(const std::string& name) {
  LossCase c;
  std::ifstream in(losses_dir() / (name + ".json"));
  c.info = nlohmann::json::parse(in);
  auto file = checkpoint::SafetensorsFile::open((losses_dir() / (name + ".safetensors")).string());
  for (const auto& key : file.names()) {
    if (key == "loss")
      c.loss = file.tensor(key);
    else if (key.rfind("grad.", 0) != 0)
      c.batch[key] = file.tensor(key);
  }
  for (const auto& [hf, ours] : c.info.at("grads").items())
    c.grads[ours.get<std::string>()] = file.tensor("grad." + hf);
  return c;
}

using testing::expected_shard;

struct Measured {
  double loss = 0;
  int64_t targets = 0;
  std::map<std::string, double> grad_errors;
};

Measured run_case(const LossCase& c, const std::shared_ptr<comm::Communicator>& tp) {
  auto model = models::load_model(testing::model_fixture(c.info.at("model")), {.tp = tp});
  model->set_requires_grad(true);
  LossOutput out = compute_loss(*model, c.batch);
  EXPECT_EQ(out.loss.dtype(), DType::f32);
  EXPECT_EQ(out.loss.dim(), 0);
  autograd::backward(out.loss);
  Measured m;
  m.loss = out.loss.item<double>();
  m.targets = out.targets;
  for (auto& info : model->parameter_infos()) {
    auto want = c.grads.find(info.name);
    if (want == c.grads.end()) continue;
    Tensor grad = info.tensor->grad();
    m.grad_errors[info.name] =
        grad.defined() ? relative_error(grad, expected_shard(want->second, info)) : INFINITY;
  }
  return m;
}

void expect_matches(const LossCase& c, const Measured& m, double grad_tol) {
  const double want = c.loss.item<double>();
  EXPECT_LE(std::abs(m.loss - want), 1e-5 * std::abs(want))
      << "loss " << m.loss << ", transformers " << want;
  EXPECT_GT(m.targets, 0);
  for (const auto& [name, grad] : c.grads) {
    ASSERT_TRUE(m.grad_errors.count(name)) << "the model has no parameter " << name;
    EXPECT_LE(m.grad_errors.at(name), grad_tol) << "gradient of " << name;
  }
}

// Gradients agree within 1e-4 of their max |value|, except T5's: there transformers' own f32
// gradients differ from its f64 ones by 1.9e-4 (tools/make_loss_fixtures.py's t5 case, random
// weights of std 0.2 through unscaled attention), so f32 cannot promise more than that.
double gradient_tolerance(const std::string& name) { return name == "t5" ? 5e-4 : 1e-4; }

class LossParity : public ::testing::TestWithParam<std::string> {};

TEST_P(LossParity, LossAndGradientsMatchTransformers) {
  const LossCase c = load_case(GetParam());
  expect_matches(c, run_case(c, nullptr), gradient_tolerance(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Tasks, LossParity,
                         ::testing::Values("gpt2", "bert_mlm", "bert_pretraining", "roberta_mlm",
                                           "bert_cls", "bert_regression", "t5", "vit"),
                         [](const auto& info) { return info.param; });

TEST(LossTargets, CountLabelsThatAreNotIgnored) {
  const LossCase c = load_case("bert_mlm");
  auto model = models::load_model(testing::model_fixture("bert"));
  const auto labels = c.batch.at("labels").to_vector<int64_t>();
  const int64_t want =
      std::count_if(labels.begin(), labels.end(), [](int64_t v) { return v != -100; });
  EXPECT_EQ(compute_loss(*model, c.batch).targets, want);
}

TEST(LossErrors, MissingKeyNamesItAndTheTask) {
  const LossCase c = load_case("bert_pretraining");
  auto model = models::load_model(testing::model_fixture("bert_pretraining"));
  TensorMap batch = c.batch;
  batch.erase("next_sentence_label");
  try {
    compute_loss(*model, batch);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("\"next_sentence_label\""), std::string::npos) << what;
    EXPECT_NE(what.find("pretraining"), std::string::npos) << what;
  }
}

// Hugging Face's GPT-2 needs labels; ours default to input_ids with padding ignored, which is
// what the fixture's labels are except at [0, 7].
TEST(LossDefaults, CausalLmLabelsDefaultToInputIdsWithoutPadding) {
  const LossCase c = load_case("gpt2");
  auto model = models::load_model(testing::model_fixture("gpt2"));
  TensorMap with_labels = c.batch;
  with_labels.at("labels").data<int64_t>()[7] = c.batch.at("input_ids").to_vector<int64_t>()[7];
  TensorMap without = c.batch;
  without.erase("labels");
  const double a = compute_loss(*model, with_labels).loss.item<double>();
  const double b = compute_loss(*model, without).loss.item<double>();
  EXPECT_NEAR(a, b, 1e-6 * std::abs(a));
  EXPECT_GT(std::abs(a - c.loss.item<double>()), 1e-4);  // [0, 7] counted now
}

TEST(BertPretrainingParity, OutputsMatchTransformers) {
  auto model = models::load_model(testing::model_fixture("bert_pretraining"));
  EXPECT_EQ(model->task(), models::Task::pretraining);
  auto ref = testing::reference_of("bert_pretraining");
  TensorMap inputs;
  for (const char* k : {"input_ids", "attention_mask", "token_type_ids"}) inputs[k] = ref.tensor(k);
  TensorMap out = model->forward(inputs);
  EXPECT_LE(relative_error(out.at("prediction_logits"), ref.tensor("prediction_logits")), 1e-5);
  EXPECT_LE(relative_error(out.at("logits"), ref.tensor("prediction_logits")), 1e-5);
  EXPECT_LE(
      relative_error(out.at("seq_relationship_logits"), ref.tensor("seq_relationship_logits")),
      1e-5);
}

}  // namespace
}  // namespace libai::train
