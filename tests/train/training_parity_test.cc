// Step-for-step parity with PyTorch: the same tiny models, weights and micro-batches trained
// 30 steps by torch (tools/make_training_fixtures.py) and by us, with AdamW or SGD, LiBai's
// parameter groups, WarmupCosineLR, clipping at 1.0 and 4 accumulation steps: every step's
// loss, gradient norm and lr, and the final weights, within 1e-5 relative in f32. The loss
// scaler run skips exactly the steps torch's GradScaler skipped.
#include <gtest/gtest.h>

#include <cmath>

#include "training_fixtures.h"

namespace libai::train {
namespace {

using testing::TrainingFixture;

double relative(double actual, double expected) {
  return std::abs(actual - expected) / std::max(std::abs(expected), 1e-12);
}

// max |a - e| / max |e| over a tensor; `worst` names the element that set it.
double relative_error(const Tensor& actual, const Tensor& expected, std::string* worst = nullptr) {
  auto a = actual.to_vector<double>(), e = expected.to_vector<double>();
  double diff = 0, scale = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::abs(a[i] - e[i]) > diff) at = i;
    diff = std::max(diff, std::abs(a[i] - e[i]));
    scale = std::max(scale, std::abs(e[i]));
  }
  if (worst && !a.empty())
    *worst = "element " + std::to_string(at) + ": " + std::to_string(a[at]) + " vs " +
             std::to_string(e[at]);
  // Relative to the tensor's largest value, at least 0.01: a tensor whose values all stay
  // smaller (biases that start at zero, SwinV2's position-bias MLP) compares absolutely at 1e-7,
  // where 30 steps of f32 rounding would otherwise read as large relative errors of tiny values.
  return diff / std::max(scale, 1e-2);
}

// Note [The key bias has no gradient]: adding b to every key adds q·b to all of a query's
// scores, which the softmax cancels, so the key bias's gradient is exactly zero and what
// backward computes for it is rounding noise (~1e-9) that AdamW normalises into steps of
// size lr with random signs, different from torch's. It changes no output; the comparison
// leaves the key rows of the fused q/k/v bias ([head][q | k | v][head_dim]) out.
Tensor without_key_bias(const std::string& name, const Tensor& t, int64_t heads) {
  if (!name.ends_with("attention.qkv.bias")) return t;
  std::vector<float> v = t.to_vector<float>();
  const int64_t head_dim = int64_t(v.size()) / (3 * heads);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < head_dim; ++i) v[size_t((3 * h + 1) * head_dim + i)] = 0.0f;
  return Tensor::from_vector(v, t.shape());
}

// The attention heads of the layer `name` belongs to: Swin's differ by stage ("num_heads",
// parameters named stages.<s>....).
int64_t heads_of(const models::HfConfig& config, const std::string& name) {
  if (config.has("num_heads") && name.starts_with("stages.")) {
    const size_t stage = std::stoul(name.substr(7, name.find('.', 7) - 7));
    return config.get_int_list("num_heads").at(stage);
  }
  return config.get_int("n_head", config.get_int("num_attention_heads", 1));
}

class TrainingParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainingParity, EveryStepAndTheFinalWeightsMatchTorch) {
  const TrainingFixture f(GetParam());
  auto model = models::load_model(f.folder);
  model->set_requires_grad(true);  // before the groups: frozen parameters are left out
  auto optimizer =
      make_optimizer(default_param_groups(*model, f.group_options()), f.optimizer_options());
  LrScheduler schedule(f.schedule_options());
  TrainStep step(*model, *optimizer, &schedule, f.step_options());
  double worst_loss = 0, worst_norm = 0;
  for (int64_t s = 0; s < f.steps; ++s) {
    StepResult r = step.run(f.micro_batches(s));
    const auto& expected = f.step(s);
    SCOPED_TRACE("step " + std::to_string(s));
    if (expected["loss"].is_null()) {  // a crafted overflow: the loss itself is not finite
      EXPECT_FALSE(std::isfinite(r.loss)) << r.loss;
    } else {
      worst_loss = std::max(worst_loss, relative(r.loss, expected["loss"]));
      EXPECT_LT(relative(r.loss, expected["loss"]), 1e-5) << r.loss << " vs " << expected["loss"];
    }
    EXPECT_LT(relative(r.lr, expected["lr"]), 1e-12) << r.lr << " vs " << expected["lr"];
    EXPECT_EQ(r.skipped, bool(expected["skipped"]));
    if (!r.skipped && !expected["grad_norm"].is_null()) {
      worst_norm = std::max(worst_norm, relative(r.grad_norm, expected["grad_norm"]));
      EXPECT_LT(relative(r.grad_norm, expected["grad_norm"]), 1e-5);
    }
    EXPECT_EQ(r.loss_scale, double(expected["loss_scale"]));
  }
  // The final weights, through the model's own weight map.
  models::LoadOptions final_weights;
  final_weights.weights = f.folder / "final.safetensors";
  auto expected = models::load_model(f.folder, final_weights);
  double worst_weight = 0;
  for (const auto& [name, tensor] : model->named_parameters()) {
    std::string worst;
    const int64_t heads = heads_of(model->config(), name);
    const double e =
        relative_error(without_key_bias(name, *tensor, heads),
                       without_key_bias(name, *expected->find_parameter(name), heads), &worst);
    worst_weight = std::max(worst_weight, e);
    EXPECT_LT(e, 1e-5) << name << ", worst " << worst;
  }
  std::printf("%s: worst relative error: loss %.2e, grad norm %.2e, weights %.2e\n",
              GetParam().c_str(), worst_loss, worst_norm, worst_weight);
}

INSTANTIATE_TEST_SUITE_P(Torch, TrainingParity,
                         ::testing::Values("gpt2_adamw", "bert_pretraining_adamw", "t5_adamw",
                                           "vit_adamw", "swin_adamw", "swinv2_sgd", "gpt2_sgd",
                                           "vit_scaler"));

}  // namespace
}  // namespace libai::train

namespace libai::train {
namespace {

// Note [bf16 against the f32 curve]: under bf16 autocast every matrix product rounds its
// operands and result to 8 significant bits, so the loss curve follows torch's f32 curve
// only approximately. The bound below is what this project promises: every step's loss
// within 0.1% of the f32 reference for these 30 steps (measured 2.9e-5 to 2.9e-4).
TEST(TrainingBf16, LossCurveStaysWithinATenthOfAPercentOfF32) {
  for (const std::string name : {"gpt2_adamw", "bert_pretraining_adamw", "vit_adamw"}) {
    const testing::TrainingFixture f(name);
    auto model = models::load_model(f.folder);
    model->set_requires_grad(true);
    auto optimizer =
        make_optimizer(default_param_groups(*model, f.group_options()), f.optimizer_options());
    LrScheduler schedule(f.schedule_options());
    TrainStepOptions options = f.step_options();
    options.autocast = DType::bf16;
    TrainStep step(*model, *optimizer, &schedule, options);
    double worst = 0;
    for (int64_t s = 0; s < f.steps; ++s) {
      const double loss = step.run(f.micro_batches(s)).loss;
      const double expected = f.step(s)["loss"];
      worst = std::max(worst, std::abs(loss - expected) / expected);
    }
    std::printf("%s under bf16 autocast: worst loss deviation from the f32 curve %.2e\n",
                name.c_str(), worst);
    EXPECT_LT(worst, 1e-3) << name;
    EXPECT_GT(worst, 0.0) << name << ": bf16 autocast changed nothing";
  }
}

}  // namespace
}  // namespace libai::train
