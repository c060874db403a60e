// The Llama family (llama, mistral, qwen2) against Hugging Face transformers: forward outputs
// and generation token ids of the fixtures made by tools/make_llama_fixtures.py (grouped-query
// attention with 8 query heads over 2 key/value heads; rope scaling llama3, linear and dynamic;
// tied and untied heads; q/k/v biases; sharded and bf16 safetensors), and the config errors.
#include <gtest/gtest.h>

#include "models/generation/generate.h"
#include "models/init.h"
#include "models/llama/llama.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "runtime/autograd.h"
#include "runtime/error.h"

namespace libai::models {
namespace {

using testing::model_fixture;
using testing::reference_of;

struct Case {
  std::string folder;
  DType dtype;
  double tolerance;
};

class LlamaForward : public ::testing::TestWithParam<Case> {};

TEST_P(LlamaForward, OutputsMatchTransformers) {
  const auto& c = GetParam();
  auto model = load_model(model_fixture(c.folder), {.dtype = c.dtype});
  auto ref = reference_of(c.folder);
  autograd::NoGradGuard no_grad;
  auto out = model->forward(
      {{"input_ids", ref.tensor("input_ids")}, {"attention_mask", ref.tensor("attention_mask")}});
  auto names = testing::output_names(ref);
  ASSERT_GE(names.size(), 5u);  // logits, last_hidden_state, hidden_states.0-2
  testing::expect_outputs_match(out, ref, names, c.tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, LlamaForward,
    ::testing::Values(Case{"llama3", DType::f32, 1e-4}, Case{"llama_linear", DType::f32, 1e-4},
                      Case{"llama_dynamic", DType::f32, 1e-4}, Case{"mistral", DType::f32, 1e-4},
                      Case{"qwen2", DType::f32, 1e-4}, Case{"qwen2_bf16", DType::f32, 1e-4},
                      Case{"qwen2", DType::bf16, 1e-1}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return info.param.folder + "_" + dtype_name(info.param.dtype);
    });

// Every generation case of the reference (greedy, beam search, penalties, eos) gives
// transformers' token ids.
class LlamaGeneration : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaGeneration, TokenIdsMatchTransformers) {
  const std::string folder = GetParam();
  auto model = load_model(model_fixture(folder));
  auto* lm = model->generative();
  ASSERT_NE(lm, nullptr);
  const auto ref = testing::reference_json(folder);
  const auto& cases = ref.at("generation").at("cases");
  ASSERT_GE(cases.size(), 5u);
  const auto ran = testing::expect_generation_matches_reference(*lm, cases, folder);
  EXPECT_TRUE(ran.greedy && ran.beam) << folder << ": reference.json should hold greedy and beam cases";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaGeneration,
                         ::testing::Values("llama3", "llama_linear", "llama_dynamic", "mistral",
                                           "qwen2"));

HfConfig config_with(nlohmann::json edit) {
  nlohmann::json j = {{"model_type", "llama"},    {"vocab_size", 11},
                      {"hidden_size", 16},        {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"num_hidden_layers", 1},
                      {"intermediate_size", 24}};
  j.update(edit);
  return HfConfig::from_json(j, "cfg/config.json");
}

// The message, or "" when `fn` does not throw that kind.
template <typename Fn>
std::string error_of(ErrorKind kind, Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  return "";
}

TEST(LlamaConfig, UnsupportedRopeTypeIsNamed) {
  for (const auto& edit :
       {nlohmann::json{{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
        nlohmann::json{{"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}}}},
        nlohmann::json{{"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 1e4}}}}}) {
    const std::string message =
        error_of(ErrorKind::unsupported, [&] { LlamaConfig c(config_with(edit)); });
    EXPECT_NE(message.find("rope type \"yarn\" is not supported"), std::string::npos) << message;
    EXPECT_NE(message.find("cfg/config.json"), std::string::npos) << message;
  }
}

TEST(LlamaConfig, BadShapesAreCorruptInput) {
  std::string m = error_of(ErrorKind::corrupt_input, [] {
    LlamaConfig c(config_with({{"num_key_value_heads", 3}}));
  });
  EXPECT_NE(m.find("not a multiple of num_key_value_heads 3"), std::string::npos) << m;
  m = error_of(ErrorKind::corrupt_input, [] {
    LlamaConfig c(config_with({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}));
  });
  EXPECT_NE(m.find("original_max_position_embeddings"), std::string::npos) << m;
}

// The three ways a config names the rotation agree: transformers 5's rope_parameters, the
// Hub's rope_theta + rope_scaling, and rope_scaling's older "type" key.
TEST(LlamaConfig, RopeSpellingsAgree) {
  const LlamaConfig a(config_with(
      {{"rope_parameters", {{"rope_type", "linear"}, {"rope_theta", 5e5}, {"factor", 2.0}}}}));
  const LlamaConfig b(config_with(
      {{"rope_theta", 5e5}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}}));
  const LlamaConfig c(
      config_with({{"rope_theta", 5e5}, {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}));
  EXPECT_EQ(a.rope.inverse_frequencies(1), b.rope.inverse_frequencies(1));
  EXPECT_EQ(a.rope.inverse_frequencies(1), c.rope.inverse_frequencies(1));
  // linear divides the default frequencies by the factor
  const LlamaConfig plain(config_with({{"rope_theta", 5e5}}));
  const auto base = plain.rope.inverse_frequencies(1), scaled = a.rope.inverse_frequencies(1);
  ASSERT_EQ(base.size(), 2u);  // head_dim 4
  for (size_t i = 0; i < base.size(); ++i) EXPECT_FLOAT_EQ(scaled[i], base[i] / 2);
}

TEST(LlamaConfig, MistralSlidingWindowBeyondItsLengthIsRefused) {
  auto hf = config_with({{"model_type", "mistral"}, {"sliding_window", 4}});
  auto model = make_llama_lm(hf, LayerContext{});
  init_parameters(*model, 1);
  autograd::NoGradGuard no_grad;
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5}, {1, 5});
  const std::string m = error_of(ErrorKind::unsupported, [&] {
    model->forward({{"input_ids", ids}});
  });
  EXPECT_NE(m.find("exceeds sliding_window 4"), std::string::npos) << m;
  EXPECT_NO_THROW(model->forward({{"input_ids", ops::narrow(ids, 1, 0, 4)}}));
}

}  // namespace
}  // namespace libai::models
