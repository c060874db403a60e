// GPT-2, BERT and RoBERTa against Hugging Face transformers: forward outputs of the fixtures
// made by tools/make_fixtures.py (tiny random-weight models with awkward sizes), loaded from
// safetensors (sharded, and bf16 on disk, too) and from pytorch_model.bin (the gpt2 and t5
// fixtures carry one: tied weights share a storage there), and generation token ids.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "models/generation/generate.h"
#include "parity_util.h"
#include "runtime/autograd.h"

namespace libai::models {
namespace {

using testing::model_fixture;
using testing::reference_of;

const char* kInputs[] = {"input_ids", "attention_mask", "token_type_ids", "decoder_input_ids",
                         "decoder_attention_mask", "pixel_values"};

TensorMap reference_inputs(const checkpoint::SafetensorsFile& ref) {
  TensorMap inputs;
  for (const char* name : kInputs)
    if (ref.contains(name)) inputs[name] = ref.tensor(name);
  return inputs;
}

struct ForwardCase {
  std::string folder, reference;
  WeightFormat format;
  DType dtype;
  double tolerance;
};

std::string case_name(const ::testing::TestParamInfo<ForwardCase>& info) {
  const auto& c = info.param;
  std::string format = c.format == WeightFormat::torch ? "torch" : "safetensors";
  return c.folder + "_" + format + "_" + dtype_name(c.dtype);
}

class ForwardParity : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardParity, OutputsMatchTransformers) {
  const auto& c = GetParam();
  auto model = load_model(model_fixture(c.folder), {.dtype = c.dtype, .format = c.format});
  auto ref = reference_of(c.reference);
  autograd::NoGradGuard no_grad;
  auto out = model->forward(reference_inputs(ref));
  auto names = testing::output_names(ref);
  ASSERT_FALSE(names.empty());
  testing::expect_outputs_match(out, ref, names, c.tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Families, ForwardParity,
    ::testing::Values(ForwardCase{"gpt2", "gpt2", WeightFormat::safetensors, DType::f32, 1e-4},
                      ForwardCase{"gpt2", "gpt2", WeightFormat::torch, DType::f32, 1e-4},
                      ForwardCase{"gpt2_sharded", "gpt2", WeightFormat::any, DType::f32, 1e-4},
                      ForwardCase{"gpt2_bf16", "gpt2_bf16", WeightFormat::any, DType::f32, 1e-4},
                      ForwardCase{"gpt2", "gpt2", WeightFormat::any, DType::bf16, 1e-1},
                      ForwardCase{"bert", "bert", WeightFormat::safetensors, DType::f32, 1e-4},
                      ForwardCase{"bert_cls", "bert_cls", WeightFormat::any, DType::f32, 1e-4},
                      ForwardCase{"roberta", "roberta", WeightFormat::safetensors, DType::f32, 1e-4},
                      ForwardCase{"roberta_cls", "roberta_cls", WeightFormat::any, DType::f32, 1e-4}),
    case_name);

using testing::config_from;
using testing::reference_json;

// Every generation case of a fixture's reference.json gives Hugging Face's token ids (and its
// sequences_scores for beam search).
void expect_generation_matches(const std::string& folder) {
  auto model = load_model(model_fixture(folder));
  auto* lm = model->generative();
  ASSERT_NE(lm, nullptr);
  const auto ref = reference_json(folder);
  const auto& cases = ref.at("generation").at("cases");
  ASSERT_FALSE(cases.empty());
  const auto ran = testing::expect_generation_matches_reference(*lm, cases, folder);
  EXPECT_TRUE(ran.greedy && ran.beam) << folder << ": reference.json should hold greedy and beam cases";
}

TEST(GenerationParity, Gpt2MatchesTransformers) { expect_generation_matches("gpt2"); }

}  // namespace
}  // namespace libai::models
