// models::Linear under TrainingMode::autocast (Note [Autocast] in models/layers/linear.cc):
// the forward output and the f32 parameters' gradients against torch.autocast("cpu") on the
// same tensors (tools/make_autocast_fixtures.py), and against the plain f32 Linear within the
// error that rounding the operands to 16 bits allows.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "models/layers/linear.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/checkpoint/safetensors.h"

namespace libai::models {
namespace {

const checkpoint::SafetensorsFile& fixture() {
  static const auto file = checkpoint::SafetensorsFile::open(
      (std::filesystem::path(LIBAI_SOURCE_DIR) / "tests/data/autocast/linear.safetensors")
          .string());
  return file;
}

struct LinearRun {
  Tensor y, grad_x, grad_weight, grad_bias;
};

// The fixture's Linear on the fixture's input, backpropagating its grad_out, under `autocast`.
LinearRun run_linear(DType autocast) {
  const auto& f = fixture();
  Tensor x = f.tensor("x").clone_raw().set_requires_grad(true);
  Linear linear(LayerContext{}, x.size(-1), f.tensor("weight").size(0));
  linear.weight().copy_from(f.tensor("weight"));
  linear.bias()->copy_from(f.tensor("bias"));
  linear.set_requires_grad(true);
  Tensor y;
  {
    TrainingModeGuard guard({.training = true, .autocast = autocast});
    y = linear.forward(x);
  }
  autograd::backward(y, f.tensor("grad_out"));
  return {y.detach(), x.grad(), linear.weight().grad(), linear.bias()->grad()};
}

// Every element within `ulps` units in the last place of `dtype` of the reference element,
// plus `floor` (for elements that cancel to near zero).
void expect_within_ulps(const Tensor& actual, const Tensor& expected, DType dtype, double ulps,
                        double floor, const std::string& what) {
  ASSERT_EQ(actual.dtype(), DType::f32) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const int precision = dtype == DType::bf16 ? 8 : 11;  // significand bits
  auto a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    const double ulp =
        std::ldexp(1.0, std::ilogb(std::max(std::abs(e[i]), 1e-30)) - (precision - 1));
    ASSERT_LE(std::abs(a[i] - e[i]), ulps * ulp + floor)
        << what << " element " << i << ": " << a[i] << " vs " << e[i];
  }
}

TEST(Autocast, LinearMatchesTorchAutocast) {
  for (auto [dtype, name] : {std::pair{DType::bf16, "bf16"}, std::pair{DType::f16, "f16"}}) {
    LinearRun got = run_linear(dtype);
    const auto& f = fixture();
    const std::string p = std::string(name) + ".";
    // The 16-bit products round once from an f32 sum over the same 16-bit inputs as torch's;
    // only the summation order differs, so results agree to one 16-bit ulp.
    expect_within_ulps(got.y, f.tensor(p + "y"), dtype, 1, 1e-6, p + "y");
    expect_within_ulps(got.grad_x, f.tensor(p + "grad_x"), dtype, 1, 1e-6, p + "grad_x");
    expect_within_ulps(got.grad_weight, f.tensor(p + "grad_weight"), dtype, 1, 1e-6,
                       p + "grad_weight");
    expect_within_ulps(got.grad_bias, f.tensor(p + "grad_bias"), dtype, 1, 1e-6, p + "grad_bias");
  }
}

// Against the f32 Linear: each operand rounds to 16 bits (relative error u = 2^-8 for bf16,
// 2^-11 for f16), so a product's error is at most (2u + u^2) sum |x||w| before the output's
// own rounding (u |y|). Checked element by element with the bound computed in f64.
TEST(Autocast, LinearWithinRoundingOfF32) {
  const auto& f = fixture();
  LinearRun exact = run_linear(DType::f32);
  auto x = f.tensor("x").to_vector<double>(), w = f.tensor("weight").to_vector<double>();
  auto b = f.tensor("bias").to_vector<double>();
  const int64_t in = f.tensor("weight").size(1), out = f.tensor("weight").size(0);
  const int64_t rows = int64_t(x.size()) / in;
  for (DType dtype : {DType::bf16, DType::f16}) {
    const double u = dtype == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    LinearRun got = run_linear(dtype);
    auto y = got.y.to_vector<double>(), y32 = exact.y.to_vector<double>();
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double magnitude = std::abs(b[size_t(o)]);
        for (int64_t i = 0; i < in; ++i)
          magnitude += std::abs(x[size_t(r * in + i)] * w[size_t(o * in + i)]);
        const double e = y32[size_t(r * out + o)],
                     bound = (2 * u + u * u) * magnitude + u * (std::abs(e) + u * magnitude) + 1e-6;
        const double diff = std::abs(y[size_t(r * out + o)] - e);
        ASSERT_LE(diff, bound) << dtype_name(dtype) << " y element " << r << ", " << o;
        worst = std::max(worst, diff / bound);
      }
    // The bound is not so loose that anything passes: rounding error shows up.
    EXPECT_GT(worst, 0.01) << dtype_name(dtype);
    EXPECT_EQ(got.grad_weight.dtype(), DType::f32);
  }
}

TEST(Autocast, OffForNon32BitParametersAndOutsideTheGuard) {
  // Without autocast the f32 Linear computes in f32: bit-equal to ops::linear.
  const auto& f = fixture();
  Linear linear(LayerContext{}, f.tensor("x").size(-1), f.tensor("weight").size(0));
  linear.weight().copy_from(f.tensor("weight"));
  linear.bias()->copy_from(f.tensor("bias"));
  Tensor plain = ops::linear(f.tensor("x"), f.tensor("weight"), f.tensor("bias"));
  EXPECT_EQ(linear.forward(f.tensor("x")).to_vector<float>(), plain.to_vector<float>());
  // bf16 parameters under autocast f16: nothing is cast (autocast only lowers f32).
  Linear half(LayerContext{.dtype = DType::bf16}, 4, 3);
  TrainingModeGuard guard({.autocast = DType::f16});
  EXPECT_EQ(half.forward(Tensor::zeros({2, 4}, DType::bf16)).dtype(), DType::bf16);
}

}  // namespace
}  // namespace libai::models
