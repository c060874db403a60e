// T5 (v1.0: relu, tied and scaled head), T5 v1.1 (gated-gelu, own lm_head) and mT5 against
// Hugging Face transformers: forward outputs of the fixtures made by tools/make_fixtures.py
// (safetensors and pytorch_model.bin), cached decoding step by step against the full forward,
// beam-style row selection, generation token ids, relative position buckets and config errors.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "models/generation/generate.h"
#include "models/t5/t5_stack.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "runtime/autograd.h"

namespace libai::models {
namespace {

using testing::model_fixture;
using testing::reference_of;

// Relative to the reference's max |value|. The t5 fixture's large decoder norm weights (below)
// amplify f32 rounding: OpenBLAS's AVX2 kernels (a CPU without AVX-512) gave 1.02e-4 on its
// logits, its AVX-512 ones under 1e-4.
constexpr double kTolerance = 2e-4;
// Cached decoding sums in another order than the reference's full forward; the t5 fixture's
// large decoder norm weights (about 15, so that greedy decoding does not collapse) amplify
// that f32 rounding to about 2e-4.
constexpr double kDecodingTolerance = 5e-4;

TensorMap reference_inputs(const checkpoint::SafetensorsFile& ref) {
  TensorMap inputs;
  for (const char* name :
       {"input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask"})
    if (ref.contains(name)) inputs[name] = ref.tensor(name);
  return inputs;
}

struct T5Case {
  std::string folder;
  WeightFormat format;
};

class T5ForwardParity : public ::testing::TestWithParam<T5Case> {};

TEST_P(T5ForwardParity, OutputsMatchTransformers) {
  const auto& c = GetParam();
  LoadOptions options;
  options.format = c.format;
  auto model = load_model(model_fixture(c.folder), options);
  EXPECT_EQ(model->task(), Task::seq2seq_lm);
  auto ref = reference_of(c.folder);
  autograd::NoGradGuard no_grad;
  auto out = model->forward(reference_inputs(ref));
  auto names = testing::output_names(ref);
  // logits, encoder_last_hidden_state and every encoder/decoder hidden state.
  ASSERT_GE(names.size(), 4u);
  for (const auto& name : names) EXPECT_TRUE(out.count(name)) << "missing output " << name;
  for (const auto& [name, tensor] : out) EXPECT_TRUE(ref.contains(name)) << "extra output " << name;
  testing::expect_outputs_match(out, ref, names, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, T5ForwardParity,
    ::testing::Values(T5Case{"t5", WeightFormat::safetensors}, T5Case{"t5", WeightFormat::torch},
                      T5Case{"t5v11", WeightFormat::safetensors},
                      T5Case{"mt5", WeightFormat::safetensors}),
    [](const ::testing::TestParamInfo<T5Case>& info) {
      return info.param.folder +
             (info.param.format == WeightFormat::torch ? "_torch" : "_safetensors");
    });

// The prompt of each reference row: its input_ids where attention_mask is 1.
std::vector<std::vector<int64_t>> reference_prompts(const checkpoint::SafetensorsFile& ref) {
  Tensor ids = ref.tensor("input_ids"), mask = ref.tensor("attention_mask");
  auto id = ids.to_vector<int64_t>(), keep = mask.to_vector<int64_t>();
  std::vector<std::vector<int64_t>> prompts(ids.size(0));
  for (int64_t b = 0; b < ids.size(0); ++b)
    for (int64_t j = 0; j < ids.size(1); ++j)
      if (keep[b * ids.size(1) + j]) prompts[b].push_back(id[b * ids.size(1) + j]);
  return prompts;
}

class T5Decoding : public ::testing::TestWithParam<std::string> {};

// Cached decoding (relative bias row of the current position, self and cross caches) gives the
// reference forward's logits at every decoder position; select_rows reorders and repeats rows.
TEST_P(T5Decoding, CachedStepsMatchReferenceForward) {
  const std::string folder = GetParam();
  auto model = load_model(model_fixture(folder));
  auto* lm = model->generative();
  ASSERT_NE(lm, nullptr);
  EXPECT_TRUE(lm->is_encoder_decoder());
  auto ref = reference_of(folder);
  Tensor dec = ref.tensor("decoder_input_ids");  // [2, dec_len], starts with decoder_start
  Tensor logits = ref.tensor("logits");          // [2, dec_len, vocab]
  const int64_t dec_len = dec.size(1);
  auto dec_ids = dec.to_vector<int64_t>();
  ASSERT_EQ(dec_ids[0], lm->decoder_start_token_id());
  EXPECT_EQ(lm->vocab_size(), logits.size(2));

  auto session = lm->start(reference_prompts(ref));
  ASSERT_EQ(session->batch_size(), 2);
  std::vector<int64_t> rows = {0, 1};  // reference row of each session row
  double worst = 0;
  for (int64_t t = 0; t < dec_len; ++t) {
    if (t == dec_len / 2) {  // as beam search does: reorder and repeat rows mid-way
      session->select_rows({1, 0, 1});
      rows = {1, 0, 1};
      ASSERT_EQ(session->batch_size(), 3);
    }
    Tensor got = session->logits();  // [batch, vocab]
    for (size_t r = 0; r < rows.size(); ++r) {
      Tensor want = ops::select(ops::select(logits, 0, rows[r]), 0, t);
      const double err = testing::relative_error(ops::select(got, 0, int64_t(r)), want);
      worst = std::max(worst, err);
      EXPECT_LE(err, kDecodingTolerance) << folder << " step " << t << " row " << r;
    }
    if (t + 1 == dec_len) break;
    std::vector<int64_t> next;
    for (int64_t row : rows) next.push_back(dec_ids[row * dec_len + t + 1]);
    session->append(next);
  }
  if (std::getenv("LIBAI_PARITY_VERBOSE"))
    std::printf("  %s cached decoding rel. error %.3g\n", folder.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, T5Decoding, ::testing::Values("t5", "t5v11", "mt5"));

using testing::config_from;
using testing::reference_json;

class T5GenerationParity : public ::testing::TestWithParam<std::string> {};

// Greedy and beam search (and the other cases in reference.json) give Hugging Face's ids.
TEST_P(T5GenerationParity, TokenIdsMatchTransformers) {
  const std::string folder = GetParam();
  auto model = load_model(model_fixture(folder));
  auto* lm = model->generative();
  ASSERT_NE(lm, nullptr);
  const auto ref = reference_json(folder);
  const auto& cases = ref.at("generation").at("cases");
  ASSERT_FALSE(cases.empty());
  const auto ran = testing::expect_generation_matches_reference(*lm, cases, folder);
  const bool greedy = ran.greedy, beam = ran.beam;
  EXPECT_TRUE(greedy && beam) << folder << ": reference.json should hold greedy and beam cases";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, T5GenerationParity, ::testing::Values("t5", "t5v11", "mt5"));

// Values printed by transformers' T5Attention._relative_position_bucket (5.24), including the
// float32 bucket edges at 2 and 4 times max_exact.
TEST(T5RelativePosition, BucketsMatchTransformers) {
  const std::vector<int64_t> positions = {-200, -129, -128, -64, -33, -32, -31, -17, -16, -15,
                                          -9,   -8,   -7,   -1,  0,   1,   7,   8,   9,   15,
                                          16,   17,   31,   32,  33,  64,  128, 200};
  struct Expected {
    int64_t num_buckets, max_distance;
    bool bidirectional;
    std::vector<int64_t> buckets;
  };
  const std::vector<Expected> cases = {
      {32, 128, true, {15, 15, 15, 14, 12, 12, 11, 10, 10, 9,  8,  8,  7,  1,
                       0,  17, 23, 24, 24, 25, 26, 26, 27, 28, 28, 30, 31, 31}},
      {32, 128, false, {31, 31, 31, 26, 21, 21, 21, 16, 16, 15, 9, 8, 7, 1,
                        0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0, 0, 0, 0}},
      {8, 20, true, {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1,
                     0, 5, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}},
      {8, 20, false, {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 6, 5, 5, 1,
                      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
  };
  for (const auto& c : cases)
    for (size_t i = 0; i < positions.size(); ++i)
      EXPECT_EQ(
          t5_relative_position_bucket(positions[i], c.bidirectional, c.num_buckets, c.max_distance),
          c.buckets[i])
          << "relative position " << positions[i] << ", " << c.num_buckets
          << " buckets, max distance " << c.max_distance
          << (c.bidirectional ? ", bidirectional" : ", causal");
}

// Bad configs fail when the model is built, with a message naming config.json's key.
TEST(T5Config, RejectsBadConfigsNamingTheKey) {
  auto expect_error = [](nlohmann::json edit, const std::string& key) {
    nlohmann::json j = {{"model_type", "t5"}, {"architectures", {"T5ForConditionalGeneration"}},
                        {"vocab_size", 32},   {"d_model", 8},
                        {"d_kv", 4},          {"d_ff", 16},
                        {"num_heads", 2},     {"num_layers", 1}};
    j.update(edit);
    try {
      create_model(HfConfig::from_json(j, "bad/config.json"), {});
      ADD_FAILURE() << "no error for " << edit.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad/config.json"), std::string::npos) << e.what();
    }
  };
  expect_error({{"feed_forward_proj", "gated-gelu-x"}}, "feed_forward_proj");
  expect_error({{"feed_forward_proj", "fancy-gelu"}}, "feed_forward_proj");
  expect_error({{"feed_forward_proj", "mish"}}, "feed_forward_proj");
  expect_error({{"feed_forward_proj", "gated-gelu"}, {"is_gated_act", false}}, "is_gated_act");
  expect_error({{"dense_act_fn", "nope"}}, "dense_act_fn");
  expect_error({{"num_heads", 0}}, "num_heads");
  expect_error({{"d_kv", -1}}, "d_kv");
  expect_error({{"relative_attention_num_buckets", 2}}, "relative_attention_num_buckets");
  expect_error({{"relative_attention_max_distance", 16}}, "relative_attention_max_distance");
  expect_error({{"decoder_start_token_id", 40}}, "decoder_start_token_id");
  expect_error({{"vocab_size", nullptr}}, "vocab_size");
  // A consistent config builds: inner dim (heads * d_kv) differs from d_model, mT5's defaults.
  nlohmann::json ok = {
      {"model_type", "mt5"}, {"vocab_size", 32}, {"d_model", 8},    {"d_kv", 3},
      {"d_ff", 16},          {"num_heads", 2},   {"num_layers", 1}, {"num_decoder_layers", 2}};
  auto model = create_model(HfConfig::from_json(ok), {});
  ASSERT_NE(model->find_parameter("decoder.layers.1.cross_attention.kv.weight"), nullptr);
  EXPECT_EQ(model->find_parameter("encoder.layers.0.attention.qkv.weight")->shape(),
            Shape({18, 8}));
  EXPECT_NE(model->find_parameter("encoder.layers.0.mlp.gate.weight"), nullptr);
  EXPECT_EQ(model->find_parameter("lm_head.weight"),
            nullptr);  // tie_word_embeddings defaults to true
}

}  // namespace
}  // namespace libai::models
