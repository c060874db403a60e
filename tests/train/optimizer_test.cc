// AdamW and SGD against torch.optim (fixtures of tools/make_optimizer_fixtures.py) and
// against f64 arithmetic written here; the checkpoint state round trip.
#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "ops/optimizer.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/threads.h"

namespace libai::train {
namespace {

std::string fixture_path(const std::string& name) {
  return std::string(LIBAI_SOURCE_DIR) + "/tests/data/training/optimizer/" + name + ".safetensors";
}

Tensor random_f32(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(gen);
  return t;
}

std::vector<double> split_doubles(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stod(item));
  return out;
}

// |ours - torch| <= 1e-6 (|torch| + 1e-3): relative, with a floor for values near zero (the
// updates are ~lr, so the floor is far below one update).
void expect_close(const Tensor& ours, const Tensor& want, const std::string& what) {
  auto a = ours.to_vector<double>(), b = want.to_vector<double>();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::abs(a[i] - b[i]), 1e-6 * (std::abs(b[i]) + 1e-3))
        << what << " element " << i << ": ours " << a[i] << ", torch " << b[i];
}

class TorchOptimizerFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchOptimizerFixture, MatchesTorchStepForStep) {
  auto file = checkpoint::SafetensorsFile::open(fixture_path(GetParam()));
  const auto& meta = file.metadata();
  const std::vector<double> lrs = split_doubles(meta.at("lrs"));
  const int steps = std::stoi(meta.at("steps"));
  ASSERT_EQ(int(lrs.size()), steps);

  std::vector<Tensor> params;
  ParamGroup group{
      .base_lr = lrs[0], .lr = lrs[0], .weight_decay = std::stod(meta.at("weight_decay"))};
  for (int i = 0; file.contains("initial." + std::to_string(i)); ++i) {
    params.push_back(file.tensor("initial." + std::to_string(i)).clone_raw());
    group.names.push_back("p" + std::to_string(i));
  }
  for (auto& p : params) group.params.push_back(&p);
  OptimizerOptions options;
  if (meta.at("kind") == "adamw") {
    options = {.kind = OptimizerKind::adamw,
               .beta1 = std::stod(meta.at("beta1")),
               .beta2 = std::stod(meta.at("beta2")),
               .eps = std::stod(meta.at("eps"))};
  } else {
    options = {.kind = OptimizerKind::sgd,
               .momentum = std::stod(meta.at("momentum")),
               .dampening = std::stod(meta.at("dampening")),
               .nesterov = meta.at("nesterov") == "1"};
  }
  auto optimizer = make_optimizer({group}, options);
  for (int step = 0; step < steps; ++step) {
    optimizer->groups()[0].lr = lrs[step];
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = "grad." + std::to_string(step) + "." + std::to_string(i);
      if (file.contains(key)) params[i].set_grad(file.tensor(key).clone_raw());
    }
    optimizer->step();
    optimizer->zero_grad();
    for (size_t i = 0; i < params.size(); ++i)
      expect_close(params[i],
                   file.tensor("param." + std::to_string(step) + "." + std::to_string(i)),
                   GetParam() + " step " + std::to_string(step) + " param " + std::to_string(i));
  }
  EXPECT_EQ(optimizer->steps_taken(), steps);
}

INSTANTIATE_TEST_SUITE_P(Torch, TorchOptimizerFixture,
                         ::testing::Values("adamw", "adamw_betas", "adamw_skip", "sgd",
                                           "sgd_weight_decay", "sgd_momentum", "sgd_dampening",
                                           "sgd_nesterov"));

// AdamW in f64 from the formula (torch's documentation), with and without bias correction.
struct ReferenceAdamW {
  std::vector<double> p, m, v;
  void step(const std::vector<double>& g, double lr, double b1, double b2, double eps, double wd,
            int64_t t, bool correct) {
    const double bc1 = correct ? 1 - std::pow(b1, double(t)) : 1;
    const double bc2 = correct ? 1 - std::pow(b2, double(t)) : 1;
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
};

class AdamWReference : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

// Sizes around the 16-lane vectors and the per-thread chunks; the f32 kernel stays within f32
// rounding of f64 over several steps.
TEST_P(AdamWReference, MatchesF64Formula) {
  const auto [n, correct] = GetParam();
  Tensor p = random_f32({n}, 1), m = Tensor::zeros({n}), v = Tensor::zeros({n});
  ReferenceAdamW ref{p.to_vector<double>(), std::vector<double>(size_t(n)),
                     std::vector<double>(size_t(n))};
  for (int64_t t = 1; t <= 4; ++t) {
    Tensor g = random_f32({n}, uint32_t(10 + t), 0.3f * float(t));
    const double lr = 1e-3 * double(5 - t);
    ops::adamw_update(p, g, m, v,
                      {.lr = lr,
                       .beta1 = 0.8,
                       .beta2 = 0.99,
                       .eps = 1e-6,
                       .weight_decay = 0.05,
                       .step = t,
                       .bias_correction = correct});
    ref.step(g.to_vector<double>(), lr, 0.8, 0.99, 1e-6, 0.05, t, correct);
  }
  auto got = p.to_vector<double>(), got_m = m.to_vector<double>(), got_v = v.to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(got[i], ref.p[i], 2e-6 * (std::abs(ref.p[i]) + 1e-2)) << "element " << i;
    // The moments' absolute floor is an f32 ulp at the gradients' scale (~1): m cancels
    // between steps, so its own size says little about its rounding.
    ASSERT_NEAR(got_m[i], ref.m[i], 1e-6 * std::abs(ref.m[i]) + 1e-7) << "element " << i;
    ASSERT_NEAR(got_v[i], ref.v[i], 1e-6 * std::abs(ref.v[i]) + 1e-7) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdamWReference,
                         ::testing::Combine(::testing::Values(1, 15, 16, 17, 200003),
                                            ::testing::Bool()));

// Elementwise work: the same bits on one thread and on all of them (Note [One formula for
// every lane width] in ops/cpu/optimizer.cc).
TEST(AdamWKernel, SameBitsOnOneThreadAndMany) {
  const int64_t n = 300007;
  auto run = [&](int threads) {
    set_thread_budget(Device::cpu(0), threads);
    Tensor p = random_f32({n}, 3), m = random_f32({n}, 4, 0.1f), v = random_f32({n}, 5, 0.1f);
    for (int64_t i = 0; i < n; ++i) v.data<float>()[i] *= v.data<float>()[i];
    ops::adamw_update(
        p, random_f32({n}, 6), m, v,
        {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .step = 7});
    return p.to_vector<float>();
  };
  const int cores = hardware_cores();
  auto one = run(1), many = run(cores);
  set_thread_budget(Device::cpu(0), cores);
  ASSERT_EQ(one, many);
}

TEST(AdamWKernel, RejectsMismatchedState) {
  Tensor p = Tensor::zeros({4, 3}), g = Tensor::zeros({4, 3}), m = Tensor::zeros({12}),
         v = Tensor::zeros({5});
  try {
    ops::adamw_update(
        p, g, m, v,
        {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .step = 1});
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("exp_avg_sq of shape [5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      ops::adamw_update(
          p, g, m, m,
          {.lr = 1e-3, .beta1 = 1.0, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .step = 1}),
      InvalidArgument);
  Tensor momentum;
  EXPECT_THROW(ops::sgd_update(p, g, momentum,
                               {.lr = 0.1,
                                .momentum = 0.9,
                                .dampening = 0,
                                .weight_decay = 0,
                                .nesterov = false,
                                .first_step = true}),
               InvalidArgument);
}

// Three parameters, one of them without a gradient on some steps.
struct Model3 {
  Tensor a = random_f32({5, 7}, 21), b = random_f32({33}, 22), c = random_f32({2, 2}, 23);
  std::vector<ParamGroup> groups(double lr) {
    return {ParamGroup{{"a", "b"}, {&a, &b}, lr, lr, 0.01}, ParamGroup{{"c"}, {&c}, lr, lr, 0.0}};
  }
  void set_grads(int step) {
    a.set_grad(random_f32(a.shape(), uint32_t(100 + step)));
    if (step % 2 == 0) b.set_grad(random_f32(b.shape(), uint32_t(200 + step)));
    c.set_grad(random_f32(c.shape(), uint32_t(300 + step)));
  }
  std::vector<float> values() const {
    std::vector<float> out;
    for (const Tensor* t : {&a, &b, &c}) {
      auto v = t->to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

class StateRoundTrip : public ::testing::TestWithParam<OptimizerOptions> {};

// Run 3 steps, save the state, run 3 more; a fresh optimizer loaded from the saved state
// (over a copy of the weights at the save) must produce the same bits.
TEST_P(StateRoundTrip, ResumedStepsAreBitwiseEqual) {
  Model3 model, resumed;
  auto optimizer = make_optimizer(model.groups(1e-2), GetParam());
  for (int step = 0; step < 3; ++step) {
    model.set_grads(step);
    optimizer->step();
    optimizer->zero_grad();
  }
  std::map<std::string, Tensor> saved;
  for (auto& [key, t] : optimizer->state_tensors())
    saved[key] = t.clone_raw();  // as a file holds it
  resumed.a.copy_from(model.a);
  resumed.b.copy_from(model.b);
  resumed.c.copy_from(model.c);
  auto loaded = make_optimizer(resumed.groups(1e-2), GetParam());
  loaded->load_state_tensors(saved);
  EXPECT_EQ(loaded->steps_taken(), 3);
  for (int step = 3; step < 6; ++step) {
    model.set_grads(step);
    resumed.set_grads(step);
    optimizer->step();
    loaded->step();
    optimizer->zero_grad();
    loaded->zero_grad();
  }
  EXPECT_EQ(model.values(), resumed.values());
}

INSTANTIATE_TEST_SUITE_P(Kinds, StateRoundTrip,
                         ::testing::Values(OptimizerOptions{.kind = OptimizerKind::adamw},
                                           OptimizerOptions{.kind = OptimizerKind::sgd,
                                                            .momentum = 0.9,
                                                            .dampening = 0.1},
                                           OptimizerOptions{.kind = OptimizerKind::sgd}));

TEST(OptimizerState, KeysNameEachParameterState) {
  Model3 model;
  auto adamw = make_optimizer(model.groups(1e-3), {});
  model.a.set_grad(random_f32(model.a.shape(), 1));
  adamw->step();
  auto state = adamw->state_tensors();
  std::vector<std::string> keys;
  for (auto& [key, t] : state) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a.exp_avg", "a.exp_avg_sq", "a.step", "step"}));
  EXPECT_EQ(state.at("step").item<int64_t>(), 1);
}

TEST(OptimizerState, LoadRejectsBadState) {
  Model3 model;
  auto adamw = make_optimizer(model.groups(1e-3), {});
  model.a.set_grad(random_f32(model.a.shape(), 1));
  adamw->step();
  const auto good = adamw->state_tensors();
  auto expect_error = [&](std::map<std::string, Tensor> state, const std::string& needle) {
    try {
      adamw->load_state_tensors(state);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto no_step = good;
  no_step.erase("step");
  expect_error(no_step, "'step' is missing");
  auto partial = good;
  partial.erase("a.exp_avg_sq");
  expect_error(partial, "optimizer state of a");
  auto wrong_shape = good;
  wrong_shape["a.exp_avg"] = Tensor::zeros({7, 5});
  expect_error(wrong_shape, "expected f32 of shape [5, 7]");
  auto unknown = good;
  unknown["z.exp_avg"] = Tensor::zeros({1});
  expect_error(unknown, "'z.exp_avg' names no state");
  EXPECT_NO_THROW(adamw->load_state_tensors(good));
}

TEST(Optimizer, RejectsBadGroups) {
  Model3 model;
  auto groups = model.groups(1e-3);
  groups[1].params[0] = &model.a;
  EXPECT_THROW(make_optimizer(groups, {}), InvalidArgument);
  EXPECT_THROW(make_optimizer(model.groups(1e-3), {.kind = OptimizerKind::sgd, .nesterov = true}),
               InvalidArgument);
  auto optimizer = make_optimizer(model.groups(1e-3), {});
  model.a.set_grad(Tensor::zeros({7, 5}));
  try {
    optimizer->step();
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("gradient of a has shape [7, 5]"), std::string::npos)
        << e.what();
  }
}

TEST(Optimizer, ZeroGradDropsGradients) {
  Model3 model;
  auto optimizer = make_optimizer(model.groups(1e-3), {.kind = OptimizerKind::sgd});
  model.set_grads(0);
  optimizer->zero_grad();
  EXPECT_FALSE(model.a.grad().defined());
  EXPECT_FALSE(model.b.grad().defined());
  const auto before = model.values();
  optimizer->step();  // nothing has a gradient: nothing moves
  EXPECT_EQ(model.values(), before);
}

}  // namespace
}  // namespace libai::train
