// A family declared outside the library (Note [Families from outside the library] in
// models/family.h): a small model of this test's own, built from the library's layers, with its
// weight map (renames and a transposed kernel) and config mapping, registered at run time and
// then loaded from a folder through load_model like a built-in family.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "models/family.h"
#include "models/layers/linear.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "random_models.h"
#include "runtime/autograd.h"
#include "runtime/checkpoint/safetensors.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;

// "toy_classifier": logits = head(norm(x + fc2(gelu(fc1(x))))), x [batch, width]. Its
// checkpoints name the layers backbone.fc1 / backbone.fc2 / backbone.ln and store the head as a
// kernel [width, labels] (the transpose of a Linear weight).
class ToyClassifier : public Model {
 public:
  ToyClassifier(const HfConfig& hf, const LayerContext& ctx)
      : Model(hf), width_(hf.require_int("width")), labels_(hf.require_int("num_labels")) {
    fc1_ = &add_module("fc1", std::make_unique<Linear>(ctx, width_, 2 * width_));
    fc2_ = &add_module("fc2", std::make_unique<Linear>(ctx, 2 * width_, width_));
    norm_ = &add_module("norm", std::make_unique<Norm>(ctx, ops::NormKind::layer, width_, 1e-5));
    head_ = &add_module("head", std::make_unique<Linear>(ctx, width_, labels_));
    map_.add("fc1.weight", "backbone.fc1.weight");
    map_.add("fc1.bias", "backbone.fc1.bias");
    map_.add("fc2.weight", "backbone.fc2.weight");
    map_.add("fc2.bias", "backbone.fc2.bias");
    map_.add("norm.weight", "backbone.ln.gamma");
    map_.add("norm.bias", "backbone.ln.beta");
    map_.add_transposed("head.weight", "head.kernel");
    map_.add("head.bias", "head.bias");
  }

  TensorMap forward(const TensorMap& inputs) override {
    const Tensor& x = require_input(inputs, "features", "toy_classifier");
    Tensor h = fc2_->forward(fc1_->forward(x, Activation::gelu, Tensor()), std::nullopt, x);
    return {{"logits", head_->forward(norm_->forward(h))}};
  }
  Task task() const override { return Task::sequence_classification; }
  const WeightMap& weight_map() const override { return map_; }

 private:
  int64_t width_, labels_;
  Linear *fc1_ = nullptr, *fc2_ = nullptr, *head_ = nullptr;
  Norm* norm_ = nullptr;
  WeightMap map_;
};

std::unique_ptr<Model> make_toy(const HfConfig& config, const LayerContext& ctx,
                                const std::optional<StageSpec>& part) {
  LIBAI_CHECK_KIND(Unsupported, !part || part->is_whole(), "toy_classifier: no parts");
  return std::make_unique<ToyClassifier>(config, ctx);
}

const Family& toy_family() {
  static const Family family{
      .model_type = "toy_classifier",
      .heads = {{"", make_toy}, {"ToyClassifier", make_toy}},
      .num_layers = [](const HfConfig&) { return 1; },
  };
  return family;
}

// The checkpoint's tensors under its own names, with random values.
checkpoint::NamedTensors toy_checkpoint(int64_t width, int64_t labels) {
  uint32_t seed = 40;
  const auto random = [&](const Shape& shape) { return testing::normal_tensor(shape, seed++, 0.5); };
  return {{"backbone.fc1.weight", random({2 * width, width})},
          {"backbone.fc1.bias", random({2 * width})},
          {"backbone.fc2.weight", random({width, 2 * width})},
          {"backbone.fc2.bias", random({width})},
          {"backbone.ln.gamma", random({width})},
          {"backbone.ln.beta", random({width})},
          {"head.kernel", random({width, labels})},
          {"head.bias", random({labels})}};
}

TEST(FamilyRegistration, ARegisteredFamilyLoadsFromItsOwnCheckpointNames) {
  if (find_family("toy_classifier") == nullptr) register_family(toy_family());
  EXPECT_EQ(families().back()->model_type, "toy_classifier");
  const fs::path dir = fs::temp_directory_path() / ("libai_toy_family_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"model_type": "toy_classifier", "architectures": ["ToyClassifier"], "width": 6, "num_labels": 3})";
  const auto tensors = toy_checkpoint(6, 3);
  checkpoint::save_safetensors((dir / "model.safetensors").string(), tensors);

  auto model = load_model(dir);
  EXPECT_EQ(model->task(), Task::sequence_classification);
  const Tensor x = testing::normal_tensor({4, 6}, 7);
  autograd::NoGradGuard no_grad;
  const Tensor logits = model->forward({{"features", x}}).at("logits");
  // The same model written out with the ops on the checkpoint's tensors.
  std::map<std::string, Tensor> t(tensors.begin(), tensors.end());
  Tensor h = ops::linear(ops::gelu(ops::linear(x, t["backbone.fc1.weight"], t["backbone.fc1.bias"])),
                         t["backbone.fc2.weight"], t["backbone.fc2.bias"]) + x;
  h = ops::layer_norm(h, t["backbone.ln.gamma"], t["backbone.ln.beta"], 1e-5);
  const Tensor expected =
      ops::linear(h, ops::contiguous(ops::transpose(t["head.kernel"], 0, 1)), t["head.bias"]);
  EXPECT_LE(testing::relative_error(logits, expected), 1e-6);
  // Packed for inference, as the CLI loads it.
  auto packed = load_model(dir, {.pack_weights = true});
  EXPECT_LE(testing::relative_error(packed->forward({{"features", x}}).at("logits"), expected), 1e-5);
  fs::remove_all(dir);
}

TEST(FamilyRegistration, BadDeclarationsAreRefusedNamingThem) {
  if (find_family("toy_classifier") == nullptr) register_family(toy_family());
  const auto message = [](const Family& f) {
    try {
      register_family(f);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  static const Family duplicate{.model_type = "toy_classifier", .heads = {{"", make_toy}},
                                .num_layers = [](const HfConfig&) { return 1; }};
  EXPECT_NE(message(duplicate).find("\"toy_classifier\" is already declared"), std::string::npos);
  static const Family builtin{.model_type = "gpt2", .heads = {{"", make_toy}},
                              .num_layers = [](const HfConfig&) { return 1; }};
  EXPECT_NE(message(builtin).find("\"gpt2\" is already declared"), std::string::npos);
  static const Family headless{.model_type = "headless",
                               .num_layers = [](const HfConfig&) { return 1; }};
  EXPECT_NE(message(headless).find("at least one head"), std::string::npos);
  static const Family nameless{.heads = {{"", make_toy}}};
  EXPECT_NE(message(nameless).find("no model_type"), std::string::npos);
  EXPECT_EQ(find_family("headless"), nullptr);
}

}  // namespace
}  // namespace libai::models
