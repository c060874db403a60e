// LiBai's default parameter groups on a small GPT-2: which parameters get which weight decay
// and lr. The expectations come from GPT-2's module names (norm modules end in "norm"), not
// from the code under test.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/models/random_models.h"
#include "train/optimizer.h"

namespace libai::train {
namespace {

std::unique_ptr<models::Model> tiny_gpt2() {
  auto model = models::create_model(models::HfConfig::from_json(testing::families()[0].config),
                                    models::LayerContext{});
  model->set_requires_grad(true);
  return model;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "layers.0.attention_norm.weight" -> "attention_norm"
std::string module_of(const std::string& name) {
  const std::string path = name.substr(0, name.rfind('.'));
  return path.substr(path.rfind('.') + 1);
}

struct Assigned {
  double lr, weight_decay;
  size_t group;
};

std::map<std::string, Assigned> by_name(const std::vector<ParamGroup>& groups) {
  std::map<std::string, Assigned> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(groups[g].names.size(), groups[g].params.size());
    EXPECT_EQ(groups[g].lr, groups[g].base_lr);
    for (const auto& name : groups[g].names) {
      EXPECT_FALSE(out.contains(name)) << name << " in two groups";
      out[name] = {groups[g].base_lr, groups[g].weight_decay, g};
    }
  }
  return out;
}

TEST(ParamGroups, NormsAndBiasesGetTheirOwnWeightDecay) {
  auto model = tiny_gpt2();
  auto groups = default_param_groups(
      *model,
      {.lr = 1e-4, .weight_decay = 0.01, .weight_decay_norm = 0.05, .weight_decay_bias = 0.0});
  auto assigned = by_name(groups);
  const auto params = model->named_parameters();
  ASSERT_EQ(assigned.size(), params.size());
  int norms = 0, biases = 0;
  for (const auto& [name, tensor] : params) {
    ASSERT_TRUE(assigned.contains(name)) << name;
    const Assigned& a = assigned.at(name);
    EXPECT_EQ(a.lr, 1e-4) << name;
    // LiBai applies the norm's decay first and the "bias" override after it.
    const double want = ends_with(name, ".bias")             ? 0.0
                        : ends_with(module_of(name), "norm") ? 0.05
                                                             : 0.01;
    EXPECT_EQ(a.weight_decay, want) << name;
    norms += ends_with(module_of(name), "norm") && ends_with(name, ".weight");
    biases += ends_with(name, ".bias");
  }
  EXPECT_EQ(norms, 2 * 2 + 1);  // two per layer, the final norm
  EXPECT_GT(biases, norms);
  // One group per distinct setting, in order of first appearance, parameters in model order.
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].weight_decay, 0.01);
  EXPECT_EQ(groups[0].names.front(), params.front().first);
  for (const auto& group : groups) {
    size_t last = 0;
    for (const auto& name : group.names) {
      size_t index = 0;
      while (params[index].first != name) ++index;
      EXPECT_TRUE(index >= last) << name << " out of order";
      last = index;
    }
  }
}

TEST(ParamGroups, OverridesByFullAndShortName) {
  auto model = tiny_gpt2();
  const std::string first = model->named_parameters().front().first;  // the token embedding
  ParamGroupOptions options{.lr = 1e-4, .weight_decay = 0.01};
  options.overrides[first] = {{"weight_decay", 0.0}, {"lr", 1e-3}};
  options.overrides["weight"] = {{"lr", 2e-4}};
  auto assigned = by_name(default_param_groups(*model, options));
  EXPECT_EQ(assigned.at(first).lr, 1e-3);  // the full name wins over the short one
  EXPECT_EQ(assigned.at(first).weight_decay, 0.0);
  for (const auto& [name, a] : assigned) {
    if (name == first) continue;
    EXPECT_EQ(a.lr, ends_with(name, ".weight") ? 2e-4 : 1e-4) << name;
  }
}

TEST(ParamGroups, LeavesOutFrozenParameters) {
  auto model = tiny_gpt2();
  auto params = model->named_parameters();
  params[1].second->set_requires_grad(false);
  auto assigned = by_name(default_param_groups(*model, {}));
  EXPECT_EQ(assigned.size(), params.size() - 1);
  EXPECT_FALSE(assigned.contains(params[1].first));
}

TEST(ParamGroups, RejectsUnknownAndConflictingOverrides) {
  auto model = tiny_gpt2();
  auto expect_error = [&](ParamGroupOptions options, const std::string& needle) {
    try {
      default_param_groups(*model, options);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  ParamGroupOptions missing;
  missing.overrides["layers.9.mlp.up.weight"] = {{"lr", 1.0}};
  expect_error(missing, "'layers.9.mlp.up.weight' names no parameter");
  ParamGroupOptions bias;
  bias.overrides["bias"] = {{"weight_decay", 0.1}};
  expect_error(bias, "conflicting overrides for 'bias'");
  ParamGroupOptions field;
  field.overrides["weight"] = {{"momentum", 0.9}};
  expect_error(field, "unknown field 'momentum'");
}

}  // namespace
}  // namespace libai::train
