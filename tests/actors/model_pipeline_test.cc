// Model stages as actors in one process: GPT-2 generation through PP = 2 and 4 (and TP = 2 x
// PP = 2, DP = 2) and T5 generation through PP = 2 and 3 (and TP = 2 x PP = 2) give the token
// ids of eager mode on one device; BERT encoding gives its
// last hidden states (f32, relative 1e-5).
#include <gtest/gtest.h>

#include "tests/actors/test_system.h"
#include "actors/jobs/model_jobs.h"
#include "models/model.h"
#include "tests/models/random_models.h"

namespace libai::actors {
namespace {

namespace fs = std::filesystem;
using models::generation::GenerationConfig;

using testing::System;

fs::path random_model(const std::string& family, int layers) {
  return testing::random_model(family, layers, "pp");
}

// A random T5 (gated-gelu, untied head) of `encoder` + `decoder` layers.
fs::path random_t5(int encoder, int decoder) {
  for (auto f : testing::families())
    if (f.name == "t5") {
      f.config["num_layers"] = encoder;
      f.config["num_decoder_layers"] = decoder;
      return testing::save_random_model(f, "pp" + std::to_string(encoder) + "_" +
                                               std::to_string(decoder) + "_" +
                                               std::to_string(::getpid()));
    }
  throw std::runtime_error("no family t5");
}

std::vector<int> even_split(int layers, int stages) {
  std::vector<int> stage_of;
  for (int l = 0; l < layers; ++l) stage_of.push_back(l * stages / layers);
  return stage_of;
}

std::vector<std::vector<int64_t>> prompts() {
  return {{5, 6, 7}, {9}, {11, 3, 30, 2}, {8, 8}, {20, 21, 22}, {1, 2, 3, 4, 5}};
}

// Returns the number of tokens eager mode generated (something worth comparing).
size_t expect_generation_matches_eager(const fs::path& folder, LayoutSizes sizes, int groups,
                                       const GenerationConfig& config) {
  System sys;
  const auto hf = models::HfConfig::load(folder);
  const int layers = models::stages::pipeline_num_layers(hf);
  PipelineLayout layout = make_layout(sizes, groups);
  LocalPipeline pipeline(*sys.system, layout,
                         model_stage_factory(folder, layout, even_split(layers, sizes.pp)));
  const auto prompt_groups = split_into_groups(prompts(), groups);
  auto results = run_generation(pipeline.client(), layout, hf, prompt_groups, config);
  pipeline.wait(std::chrono::seconds(60));

  auto eager = models::load_model(folder);
  size_t generated = 0;
  for (size_t g = 0; g < prompt_groups.size(); ++g) {
    auto expected = models::generation::generate(*eager->generative(), prompt_groups[g], config);
    EXPECT_EQ(results[g].size(), expected.size());
    if (results[g].size() != expected.size()) continue;
    for (size_t p = 0; p < expected.size(); ++p)
      for (size_t k = 0; k < expected[p].size(); ++k) {
        EXPECT_EQ(results[g][p][k].tokens, expected[p][k].tokens) << "group " << g << " prompt " << p;
        generated += expected[p][k].tokens.size();
      }
  }
  return generated;
}

TEST(ModelPipeline, Gpt2GreedyThroughTwoAndFourStages) {
  const fs::path folder = random_model("gpt2", 4);
  GenerationConfig config;
  config.max_new_tokens = 6;
  expect_generation_matches_eager(folder, {.dp = 1, .pp = 2, .tp = 1}, 2, config);
  expect_generation_matches_eager(folder, {.dp = 1, .pp = 4, .tp = 1}, 4, config);
  fs::remove_all(folder);
}

TEST(ModelPipeline, Gpt2TensorAndDataParallelStages) {
  const fs::path folder = random_model("gpt2", 4);
  GenerationConfig config;
  config.max_new_tokens = 5;
  expect_generation_matches_eager(folder, {.dp = 1, .pp = 2, .tp = 2}, 3, config);
  expect_generation_matches_eager(folder, {.dp = 2, .pp = 2, .tp = 1}, 4, config);
  fs::remove_all(folder);
}

TEST(ModelPipeline, Gpt2BeamSearchAndEosThroughStages) {
  const fs::path folder = random_model("gpt2", 4);
  GenerationConfig config;
  config.max_new_tokens = 5;
  config.num_beams = 3;
  config.num_return_sequences = 2;
  config.eos_token_ids = {0};
  expect_generation_matches_eager(folder, {.dp = 1, .pp = 2, .tp = 1}, 2, config);
  fs::remove_all(folder);
}

// Three encoder layers and two decoder layers: PP = 2 cuts exactly between the stacks; PP = 3
// cuts inside the encoder, and its middle stage holds the encoder's end and the decoder's start.
TEST(ModelPipeline, T5GreedyThroughTwoAndThreeStages) {
  const fs::path folder = random_t5(3, 2);
  GenerationConfig config;
  config.max_new_tokens = 6;
  expect_generation_matches_eager(folder, {.dp = 1, .pp = 2, .tp = 1}, 2, config);
  expect_generation_matches_eager(folder, {.dp = 1, .pp = 3, .tp = 1}, 3, config);
  fs::remove_all(folder);
}

TEST(ModelPipeline, T5BeamSearchAndTensorParallelStages) {
  const fs::path folder = random_t5(3, 2);
  GenerationConfig config;
  config.max_new_tokens = 5;
  config.num_beams = 3;
  config.num_return_sequences = 2;
  config.eos_token_ids = {1};
  EXPECT_GT(expect_generation_matches_eager(folder, {.dp = 1, .pp = 3, .tp = 1}, 3, config), 24u);
  config.num_beams = 1;
  config.num_return_sequences = 1;
  expect_generation_matches_eager(folder, {.dp = 1, .pp = 2, .tp = 2}, 2, config);
  fs::remove_all(folder);
}

TEST(ModelPipeline, BertEncodingMatchesOneDevice) {
  const fs::path folder = random_model("bert", 4);
  System sys;
  PipelineLayout layout = make_layout({.dp = 1, .pp = 4, .tp = 1}, 3);
  LocalPipeline pipeline(*sys.system, layout, model_stage_factory(folder, layout, even_split(4, 4)));
  std::vector<models::TensorMap> batches;
  for (int g = 0; g < 3; ++g) {
    Tensor ids = testing::ids_tensor({2, 5 + g}, 10 + g, 37);
    Tensor mask = Tensor::ones({2, 5 + g}, DType::i64);
    mask.data<int64_t>()[4 + g] = 0;  // the last token of row 0 is padding
    batches.push_back({{"input_ids", ids}, {"attention_mask", mask}});
  }
  auto hidden = run_encoding(pipeline.client(), layout, batches);
  pipeline.wait(std::chrono::seconds(60));
  auto eager = models::load_model(folder);
  for (size_t g = 0; g < batches.size(); ++g) {
    Tensor expected = eager->forward(batches[g]).at("last_hidden_state");
    auto a = hidden[g].to_vector<float>(), b = expected.to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i])));
  }
  fs::remove_all(folder);
}

}  // namespace
}  // namespace libai::actors
