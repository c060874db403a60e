// The family declarations (models/family.h) against what they declare: every random model of
// tests/models/random_models.h is found by its model_type, builds whole and cut at every layer,
// generates as its family says, has a cost and a FLOPs count per layer it cuts, and its
// inference stages hold the same tensors under the same names as the model parts.
#include <gtest/gtest.h>

#include <set>

#include "models/family.h"
#include "models/stages/stage.h"
#include "ops/ops.h"
#include "random_models.h"

namespace libai::models {
namespace {

std::set<std::string> parameter_names(Module& module) {
  std::set<std::string> names;
  for (auto& [name, p] : module.named_parameters()) names.insert(name);
  return names;
}

TEST(FamilyDeclarations, EveryModelTypeIsDeclaredOnceWithADefaultHead) {
  std::set<std::string> types;
  for (const Family* family : families()) {
    EXPECT_TRUE(types.insert(family->model_type).second) << family->model_type;
    EXPECT_EQ(find_family(family->model_type), family);
    ASSERT_TRUE(family->num_layers) << family->model_type;
    bool has_default = false;
    for (const auto& head : family->heads) {
      EXPECT_TRUE(head.make) << family->model_type << " " << head.architecture;
      has_default |= head.architecture.empty();
    }
    EXPECT_TRUE(has_default) << family->model_type;
    EXPECT_EQ(family->generates != GenerationKind::none, family->generation != nullptr)
        << family->model_type;
  }
  EXPECT_EQ(find_family("mamba"), nullptr);
  try {
    family_of(HfConfig::from_json({{"model_type", "mamba"}}));
    ADD_FAILURE() << "mamba was accepted";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find(family_names()), std::string::npos) << e.what();
  }
}

TEST(FamilyDeclarations, EachRandomModelIsBuiltCutCostedAndStagedAsItsFamilyDeclares) {
  for (const auto& f : testing::families()) {
    SCOPED_TRACE(f.name);
    const auto dir = testing::save_random_model(f, "family");
    const HfConfig config = HfConfig::load(dir);
    const Family& family = family_of(config);
    const int layers = family.num_layers(config);
    ASSERT_GT(layers, 0);
    EXPECT_EQ(stages::pipeline_num_layers(config), layers);

    auto whole = load_model(dir);
    EXPECT_EQ(whole->part(), (StageSpec{0, layers, layers}));
    // The parts of a cut after every layer hold every parameter of the whole model.
    std::set<std::string> in_parts;
    for (int i = 0; i < layers; ++i) {
      auto part = load_model(dir, {.part = StageSpec{i, i + 1, layers}});
      for (const auto& name : parameter_names(*part)) in_parts.insert(name);
    }
    EXPECT_EQ(in_parts, parameter_names(*whole));

    auto* generative = whole->generative();
    EXPECT_EQ(generative != nullptr, family.generates != GenerationKind::none);
    if (generative) {
      EXPECT_EQ(generative->is_encoder_decoder(), family.generates == GenerationKind::seq2seq);
      EXPECT_EQ(family.generation(config).vocab_size, generative->vocab_size());
      EXPECT_EQ(stages::is_encoder_decoder(config), generative->is_encoder_decoder());
      EXPECT_EQ(stages::is_decoder_only(config), !generative->is_encoder_decoder());
    }
    if (family.costs.layers) EXPECT_EQ(int(stages::layer_costs(config, 8).size()), layers);
    if (family.flops) EXPECT_GT(family.flops(config).matrix_parameters, 0);

    // An inference stage loads the tensors of the model part with the same layers (the
    // encoders' stages stop before the head).
    if (!family.make_stage) continue;
    for (int i = 0; i < layers; ++i) {
      const StageSpec spec{i, i + 1, layers};
      auto stage = stages::load_stage(dir, spec);
      auto part = load_model(dir, {.part = spec});
      const auto stage_names = parameter_names(*stage), part_names = parameter_names(*part);
      for (const auto& name : stage_names)
        EXPECT_TRUE(part_names.count(name)) << to_string(spec) << ": " << name;
      for (const auto& [name, p] : stage->named_parameters())
        EXPECT_EQ(ops::contiguous(*p).to_vector<float>(),
                  ops::contiguous(*part->find_parameter(name)).to_vector<float>())
            << name;
    }
  }
}

}  // namespace
}  // namespace libai::models
