// Model parts (models/model.h, Note [Model parts]) against the whole model: a random model cut
// at every split and chained by hand (each part's "hidden_states" output becomes a leaf of the
// next, and backward hands each part the gradient of its output) gives the whole model's
// outputs and every parameter's gradient, with dropout on (masks keyed by module path and
// sample) and with activation checkpointing; a part holds only its own parameters, under the
// whole model's names, and loads only its tensors.
#include <gtest/gtest.h>

#include <set>

#include "models/training_mode.h"
#include "ops/ops.h"
#include "random_models.h"
#include "runtime/autograd.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;

std::vector<StageSpec> cuts(const std::vector<int>& sizes) {
  std::vector<StageSpec> specs;
  int total = 0, first = 0;
  for (int n : sizes) total += n;
  for (int n : sizes) {
    specs.push_back({first, first + n, total});
    first += n;
  }
  return specs;
}

std::vector<std::vector<int>> all_splits(int layers) {
  std::vector<std::vector<int>> splits;
  for (int mask = 0; mask < (1 << (layers - 1)); ++mask) {
    std::vector<int> sizes{1};
    for (int i = 0; i < layers - 1; ++i) {
      if (mask & (1 << i))
        sizes.push_back(1);
      else
        ++sizes.back();
    }
    splits.push_back(sizes);
  }
  return splits;
}

fs::path random_gpt2(int layers) {
  for (auto f : testing::families()) {
    if (f.name != "gpt2") continue;
    f.config["n_layer"] = layers;
    f.config["embd_pdrop"] = 0.2;
    f.config["attn_pdrop"] = 0.2;
    f.config["resid_pdrop"] = 0.2;
    f.name += "_parts" + std::to_string(layers);
    return testing::save_random_model(f);
  }
  return {};
}

struct Result {
  Tensor logits;
  std::map<std::string, Tensor> grads;
};

// sum(logits * weights) backpropagated; `weights` fixes a gradient that is not all ones.
Tensor objective(const Tensor& logits, const Tensor& weights) {
  return ops::sum(ops::mul(logits, weights), {0, 1, 2});
}

Result run_whole(const fs::path& dir, const TensorMap& batch, const Tensor& weights) {
  auto model = load_model(dir);
  model->set_requires_grad(true);
  TensorMap out = model->forward(batch);
  autograd::backward(objective(out.at("logits"), weights));
  Result r{out.at("logits").detach(), {}};
  for (auto& [name, p] : model->named_parameters()) r.grads[name] = p->grad();
  return r;
}

Result run_chained(const fs::path& dir, const std::vector<StageSpec>& specs, const TensorMap& batch,
                const Tensor& weights) {
  std::vector<std::unique_ptr<Model>> parts;
  for (const auto& spec : specs) {
    parts.push_back(load_model(dir, {.part = spec}));
    parts.back()->set_requires_grad(true);
  }
  // Forward: each later part starts from a leaf copy of what it received.
  std::vector<TensorMap> outs;
  std::vector<Tensor> received(specs.size());
  TensorMap in = batch;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) {
      received[i] = in.at("hidden_states").detach();
      received[i].set_requires_grad(true);
      in["hidden_states"] = received[i];
    }
    outs.push_back(parts[i]->forward(in));
    TensorMap next = batch;  // side inputs travel with the activations
    for (auto& [k, v] : outs.back()) next[k] = v;
    in = next;
  }
  // Backward, last part first.
  autograd::backward(objective(outs.back().at("logits"), weights));
  for (size_t i = parts.size() - 1; i > 0; --i)
    autograd::backward(outs[i - 1].at("hidden_states"), received[i].grad());
  Result r{outs.back().at("logits").detach(), {}};
  for (auto& part : parts)
    for (auto& [name, p] : part->named_parameters()) {
      Tensor g = p->grad();
      auto [it, fresh] = r.grads.emplace(name, g);
      if (!fresh) it->second = ops::add(it->second, g);  // a tied table on two parts
    }
  return r;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(shape_str(a.shape()), shape_str(b.shape()));
  auto x = ops::contiguous(a).to_vector<float>(), y = ops::contiguous(b).to_vector<float>();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, double(std::abs(x[i] - y[i])));
  return d;
}

void expect_same(const Result& whole, const Result& chained, const std::string& what) {
  EXPECT_LE(max_abs_diff(whole.logits, chained.logits), 1e-5) << what;
  ASSERT_EQ(whole.grads.size(), chained.grads.size()) << what;
  for (auto& [name, g] : whole.grads) {
    ASSERT_TRUE(chained.grads.count(name)) << what << ": " << name;
    ASSERT_TRUE(g.defined() && chained.grads.at(name).defined()) << what << ": " << name;
    EXPECT_LE(max_abs_diff(g, chained.grads.at(name)), 1e-5) << what << ": " << name;
  }
}

TEST(ModelParts, Gpt2EverySplitGivesTheWholeModelsLogitsAndGradients) {
  const fs::path dir = random_gpt2(4);
  const TensorMap batch{{"input_ids", testing::ids_tensor({3, 7}, 11, 37)},
                        {"attention_mask", Tensor::from_vector<int64_t>(
                                               {1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1,
                                                1, 1, 1, 1, 1, 0, 0},
                                               {3, 7})}};
  const Tensor weights = testing::normal_tensor({3, 7, 37}, 5);
  for (bool checkpointing : {false, true}) {
    // Dropout on: the masks must not depend on where the model is cut.
    TrainingModeGuard mode({.training = true, .seed = 7, .step = 3, .sample_offset = 6,
                            .activation_checkpoint = checkpointing});
    const Result whole = run_whole(dir, batch, weights);
    for (const auto& sizes : all_splits(4)) {
      std::string name = checkpointing ? "checkpointing, split" : "split";
      for (int n : sizes) name += " " + std::to_string(n);
      expect_same(whole, run_chained(dir, cuts(sizes), batch, weights), name);
    }
  }
}

TEST(ModelParts, APartHoldsOnlyItsOwnParametersUnderTheWholeModelsNames) {
  const fs::path dir = random_gpt2(4);
  auto middle = load_model(dir, {.part = StageSpec{1, 3, 4}});
  std::set<std::string> names;
  for (auto& [name, p] : middle->named_parameters()) names.insert(name.substr(0, name.find('.', 7)));
  EXPECT_EQ(names, (std::set<std::string>{"layers.1", "layers.2"}));
  EXPECT_EQ(middle->part(), (StageSpec{1, 3, 4}));
  EXPECT_EQ(middle->generative(), nullptr);

  auto last = load_model(dir, {.part = StageSpec{3, 4, 4}});
  std::map<std::string, Tensor*> held, all;
  for (auto& [name, p] : last->named_parameters()) held[name] = p;
  EXPECT_TRUE(held.count("embed.weight"));  // the tied head
  EXPECT_TRUE(held.count("final_norm.weight"));
  EXPECT_FALSE(held.count("positions.weight"));
  // Every tensor equals the whole model's.
  auto whole = load_model(dir);
  for (auto& [name, p] : whole->named_parameters()) all[name] = p;
  for (auto& [name, p] : held) EXPECT_EQ(max_abs_diff(*p, *all.at(name)), 0.0) << name;
}

TEST(ModelParts, BadPartsAreRejectedNamingTheRange) {
  const fs::path dir = random_gpt2(4);
  for (StageSpec bad : {StageSpec{2, 2, 4}, StageSpec{0, 5, 5}, StageSpec{3, 5, 4},
                        StageSpec{-1, 2, 4}}) {
    try {
      load_model(dir, {.part = bad});
      ADD_FAILURE() << to_string(bad) << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(to_string(bad)), std::string::npos) << e.what();
    }
  }
  auto part = load_model(dir, {.part = StageSpec{1, 4, 4}});
  EXPECT_THROW(part->forward({{"input_ids", testing::ids_tensor({1, 3}, 1, 37)}}), Error);
}

}  // namespace
}  // namespace libai::models
