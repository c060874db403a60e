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

// A random model of `family` from random_models.h with `edits` applied to its config.
fs::path random_model(const std::string& family, const nlohmann::json& edits,
                      const std::string& tag) {
  for (auto f : testing::families()) {
    if (f.name != family) continue;
    f.config.update(edits);
    f.name += "_parts_" + tag;
    return testing::save_random_model(f);
  }
  ADD_FAILURE() << "no random model " << family;
  return {};
}

fs::path random_gpt2(int layers) {
  return random_model("gpt2",
                      {{"n_layer", layers}, {"embd_pdrop", 0.2}, {"attn_pdrop", 0.2},
                       {"resid_pdrop", 0.2}},
                      std::to_string(layers));
}

struct Result {
  std::map<std::string, Tensor> outputs;
  std::map<std::string, Tensor> grads;
};

// The loss the test backpropagates: sum over the compared outputs of sum(output * weights),
// with fixed random weights per output (so that the gradient is not all ones).
class Objective {
 public:
  explicit Objective(std::vector<std::string> names) : names_(std::move(names)) {}
  const std::vector<std::string>& names() const { return names_; }
  Tensor operator()(const TensorMap& out) {
    Tensor total;
    for (const auto& name : names_) {
      auto it = out.find(name);
      EXPECT_TRUE(it != out.end()) << "no output " << name;
      if (it == out.end()) continue;
      auto [w, fresh] = weights_.emplace(name, Tensor());
      if (fresh) w->second = testing::normal_tensor(it->second.shape(), 5 + uint32_t(weights_.size()));
      Tensor term = ops::sum_all(ops::mul(it->second, w->second));
      total = total.defined() ? ops::add(total, term) : term;
    }
    return total;
  }

 private:
  std::vector<std::string> names_;
  std::map<std::string, Tensor> weights_;
};

Result collect(Objective& objective, const TensorMap& out) {
  Result r;
  for (const auto& name : objective.names()) r.outputs[name] = out.at(name).detach();
  return r;
}

Result run_whole(const fs::path& dir, const TensorMap& batch, Objective& objective) {
  auto model = load_model(dir);
  model->set_requires_grad(true);
  TensorMap out = model->forward(batch);
  autograd::backward(objective(out));
  Result r = collect(objective, out);
  for (auto& [name, p] : model->named_parameters()) r.grads[name] = p->grad();
  return r;
}

// The parts chained as a pipeline runs them: every floating tensor a part returns becomes a
// leaf of the next part (its inputs: the micro-batch merged with what it received), and the
// backward of a part starts from the gradients of those leaves.
Result run_chained(const fs::path& dir, const std::vector<StageSpec>& specs, const TensorMap& batch,
                   Objective& objective) {
  std::vector<std::unique_ptr<Model>> parts;
  for (const auto& spec : specs) {
    parts.push_back(load_model(dir, {.part = spec}));
    parts.back()->set_requires_grad(true);
  }
  std::vector<TensorMap> outs;
  std::vector<TensorMap> received(specs.size());
  TensorMap in = batch;
  for (size_t i = 0; i < parts.size(); ++i) {
    outs.push_back(parts[i]->forward(in));
    if (i + 1 == parts.size()) break;
    in = batch;
    for (auto& [k, v] : outs.back()) {
      if (is_floating(v.dtype())) {
        Tensor leaf = v.detach();
        leaf.set_requires_grad(true);
        received[i + 1][k] = leaf;
        in[k] = leaf;
      } else {
        in[k] = v;
      }
    }
  }
  EXPECT_GE(received.size(), 1u);
  autograd::backward(objective(outs.back()));
  for (size_t i = parts.size() - 1; i > 0; --i) {
    Tensor total;  // sum over the crossing tensors of sum(output * its gradient)
    for (auto& [k, leaf] : received[i]) {
      if (!leaf.grad().defined()) continue;
      Tensor term = ops::sum_all(ops::mul(outs[i - 1].at(k), leaf.grad()));
      total = total.defined() ? ops::add(total, term) : term;
    }
    if (total.defined()) autograd::backward(total);
  }
  Result r = collect(objective, outs.back());
  for (auto& part : parts)
    for (auto& [name, p] : part->named_parameters()) {
      Tensor g = p->grad();
      auto [it, fresh] = r.grads.emplace(name, g);
      if (!fresh) it->second = ops::add(it->second, g);  // a table held by two parts
    }
  return r;
}

// max |a - b| relative to max(1, max |a|).
double relative_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(shape_str(a.shape()), shape_str(b.shape()));
  auto x = ops::contiguous(a).to_vector<float>(), y = ops::contiguous(b).to_vector<float>();
  double d = 0, scale = 1;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    d = std::max(d, double(std::abs(x[i] - y[i])));
    scale = std::max(scale, double(std::abs(x[i])));
  }
  return d / scale;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(shape_str(a.shape()), shape_str(b.shape()));
  auto x = ops::contiguous(a).to_vector<float>(), y = ops::contiguous(b).to_vector<float>();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, double(std::abs(x[i] - y[i])));
  return d;
}

void expect_same(const Result& whole, const Result& chained, const std::string& what) {
  for (auto& [name, t] : whole.outputs)
    EXPECT_LE(relative_diff(t, chained.outputs.at(name)), 1e-5) << what << ": output " << name;
  ASSERT_EQ(whole.grads.size(), chained.grads.size()) << what;
  for (auto& [name, g] : whole.grads) {
    ASSERT_TRUE(chained.grads.count(name)) << what << ": " << name;
    ASSERT_TRUE(g.defined() && chained.grads.at(name).defined()) << what << ": " << name;
    EXPECT_LE(relative_diff(g, chained.grads.at(name)), 1e-5) << what << ": " << name;
  }
}

// Every split of the model in `dir` against the whole model, with dropout on, with and
// without activation checkpointing.
void expect_every_split_matches(const fs::path& dir, int layers, const TensorMap& batch,
                                const std::vector<std::string>& outputs) {
  for (bool checkpointing : {false, true}) {
    // Dropout on: the masks must not depend on where the model is cut.
    TrainingModeGuard mode({.training = true, .seed = 7, .step = 3, .sample_offset = 6,
                            .activation_checkpoint = checkpointing});
    Objective objective(outputs);
    const Result whole = run_whole(dir, batch, objective);
    for (const auto& sizes : testing::all_splits(layers)) {
      std::string name = dir.filename().string() + (checkpointing ? ", checkpointing" : "") +
                         ", split";
      for (int n : sizes) name += " " + std::to_string(n);
      expect_same(whole, run_chained(dir, cuts(sizes), batch, objective), name);
    }
  }
}

Tensor mask_3x7() {
  return Tensor::from_vector<int64_t>(
      {1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {3, 7});
}

TEST(ModelParts, Gpt2EverySplitGivesTheWholeModelsLogitsAndGradients) {
  const fs::path dir = random_gpt2(4);
  expect_every_split_matches(
      dir, 4, {{"input_ids", testing::ids_tensor({3, 7}, 11, 37)}, {"attention_mask", mask_3x7()}},
      {"logits"});
}

const nlohmann::json kBertDropout = {{"num_hidden_layers", 4},
                                     {"hidden_dropout_prob", 0.2},
                                     {"attention_probs_dropout_prob", 0.2}};

TensorMap bert_batch() {
  return {{"input_ids", testing::ids_tensor({3, 7}, 11, 37)},
          {"attention_mask", mask_3x7()},
          {"token_type_ids", Tensor::from_vector<int64_t>({0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1,
                                                           0, 0, 0, 0, 0, 0, 0},
                                                          {3, 7})}};
}

TEST(ModelParts, BertEveryHeadAndSplitGivesTheWholeModelsOutputsAndGradients) {
  auto edits = [](const char* architecture) {
    nlohmann::json j = kBertDropout;
    j["architectures"] = {architecture};
    return j;
  };
  const TensorMap batch = bert_batch();
  expect_every_split_matches(random_model("bert", edits("BertForMaskedLM"), "mlm"), 4, batch,
                             {"logits"});
  expect_every_split_matches(random_model("bert", edits("BertModel"), "encoder"), 4, batch,
                             {"last_hidden_state", "pooler_output"});
  expect_every_split_matches(random_model("bert", edits("BertForPreTraining"), "pretraining"), 4,
                             batch, {"prediction_logits", "seq_relationship_logits"});
  expect_every_split_matches(
      random_model("bert_cls", edits("BertForSequenceClassification"), "cls"), 4, batch,
      {"logits"});
}

TEST(ModelParts, RobertaEveryHeadAndSplitGivesTheWholeModelsOutputsAndGradients) {
  nlohmann::json edits = kBertDropout;
  const TensorMap batch{{"input_ids", testing::ids_tensor({3, 7}, 11, 37)},
                        {"attention_mask", mask_3x7()}};
  expect_every_split_matches(random_model("roberta", edits, "mlm"), 4, batch, {"logits"});
  edits["architectures"] = {"RobertaForSequenceClassification"};
  edits["id2label"] = {{"0", "no"}, {"1", "yes"}};
  expect_every_split_matches(random_model("roberta", edits, "cls"), 4, batch, {"logits"});
}

TEST(ModelParts, VitEveryHeadAndSplitGivesTheWholeModelsOutputsAndGradients) {
  nlohmann::json edits = {{"num_hidden_layers", 3},
                          {"hidden_dropout_prob", 0.2},
                          {"attention_probs_dropout_prob", 0.2}};
  const TensorMap batch{{"pixel_values", testing::normal_tensor({2, 3, 16, 16}, 4)}};
  expect_every_split_matches(random_model("vit", edits, "cls"), 3, batch, {"logits"});
  edits["architectures"] = {"ViTModel"};
  expect_every_split_matches(random_model("vit", edits, "encoder"), 3, batch,
                             {"last_hidden_state", "pooler_output"});
}

// Swin's 2 + 2 blocks (the shapes of tests/data/models/swin): cuts inside a stage, and at the stage's end,
// where the patch merging stays with the stage's last block (Note [Swin parts]); dropout on.
TEST(ModelParts, SwinEverySplitGivesTheWholeModelsOutputsAndGradients) {
  const testing::Family swin{
      "swin_parts",
      {{"model_type", "swin"}, {"architectures", {"SwinForImageClassification"}},
       {"image_size", 32}, {"patch_size", 4}, {"embed_dim", 16}, {"depths", {2, 2}},
       {"num_heads", {2, 4}}, {"window_size", 4}, {"mlp_ratio", 2.0}, {"num_labels", 3},
       {"drop_path_rate", 0.0}, {"hidden_dropout_prob", 0.2}, {"attention_probs_dropout_prob", 0.2}}};
  const fs::path dir = testing::save_random_model(swin);
  const TensorMap batch{{"pixel_values", testing::normal_tensor({2, 3, 32, 32}, 4)}};
  expect_every_split_matches(dir, 4, batch, {"logits"});
}

// Two encoder and two decoder layers: the splits cut inside the encoder (1 | 3), at the
// boundary (2 | 2), inside the decoder (3 | 1) and at every combination of those.
TEST(ModelParts, T5EverySplitGivesTheWholeModelsLogitsAndGradients) {
  const TensorMap batch{
      {"input_ids", testing::ids_tensor({3, 7}, 11, 37)},
      {"attention_mask", mask_3x7()},
      {"decoder_input_ids", testing::ids_tensor({3, 5}, 13, 37)},
      {"decoder_attention_mask",
       Tensor::from_vector<int64_t>({1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {3, 5})}};
  const nlohmann::json edits = {{"num_layers", 2}, {"num_decoder_layers", 2}, {"dropout_rate", 0.2}};
  expect_every_split_matches(random_model("t5", edits, "untied"), 4, batch,
                             {"logits", "encoder_last_hidden_state"});
  expect_every_split_matches(random_model("t5_tied", edits, "tied"), 4, batch,
                             {"logits", "encoder_last_hidden_state"});
  nlohmann::json mt5 = edits;
  mt5["model_type"] = "mt5";
  mt5["architectures"] = {"MT5ForConditionalGeneration"};
  expect_every_split_matches(random_model("t5", mt5, "mt5"), 4, batch, {"logits"});
}

// The Llama family (not among random_models.h's families yet): grouped-query attention with
// rotary positions that every part applies, attention dropout on, tied (qwen2) and untied
// (llama, llama3 rope scaling) heads.
TEST(ModelParts, LlamaFamilyEverySplitGivesTheWholeModelsLogitsAndGradients) {
  for (const char* type : {"llama", "qwen2"}) {
    nlohmann::json config = {{"model_type", type},         {"vocab_size", 37},
                             {"hidden_size", 32},          {"num_attention_heads", 4},
                             {"num_key_value_heads", 2},   {"num_hidden_layers", 3},
                             {"intermediate_size", 48},    {"attention_dropout", 0.2},
                             {"tie_word_embeddings", std::string(type) == "qwen2"}};
    if (std::string(type) == "llama")
      config["rope_scaling"] = {{"rope_type", "llama3"},    {"factor", 4.0},
                                {"low_freq_factor", 1.0},   {"high_freq_factor", 4.0},
                                {"original_max_position_embeddings", 4}};
    const fs::path dir = testing::save_random_model({std::string(type) + "_parts", config});
    expect_every_split_matches(
        dir, 3, {{"input_ids", testing::ids_tensor({3, 7}, 11, 37)}, {"attention_mask", mask_3x7()}},
        {"logits"});
    fs::remove_all(dir);
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
