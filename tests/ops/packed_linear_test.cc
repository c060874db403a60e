#include "ops/packed_linear.h"

#include <cmath>

#include "ops/activation.h"
#include "ops/cpu/packed_gemm.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/view.h"
#include "runtime/autograd.h"
#include "runtime/threads.h"
#include "tests/ops/gradcheck.h"
#include "tests/ops/linear_reference.h"

namespace libai {
namespace {

using ops::cpu::PackedKernel;
using testing::expect_close;
using testing::random;
using testing::reference;
using testing::kernels;
using testing::KernelScope;
using testing::name;

// Shapes around the tile (8 rows x 48 columns), the k slice (256) and the row block (192;
// 601 rows: several blocks and a partial tile).
TEST(PackedLinear, MatchesF64ReferenceOnEveryKernelAndEdge) {
  const int64_t shapes[][3] = {{1, 1, 1},      {1, 768, 96},   {3, 5, 47},     {8, 48, 48},
                               {9, 257, 49},   {13, 300, 100}, {200, 513, 145}, {17, 64, 2},
                               {601, 300, 97}, {256, 40, 48}};
  for (PackedKernel kernel : kernels()) {
    KernelScope scope(kernel);
    for (const auto& s : shapes) {
      const int64_t m = s[0], k = s[1], n = s[2];
      Tensor x = random({m, k}, 1, DType::f32), w = random({n, k}, 2, DType::f32);
      Tensor bias = random({n}, 3, DType::f32);
      Tensor y = ops::linear_packed(x, ops::pack_weight(w), bias);
      SCOPED_TRACE(std::string(name(kernel)) + " " + std::to_string(m) + "x" +
                   std::to_string(k) + "x" + std::to_string(n));
      // f32 sums of k products of values in [-1, 1): error grows like sqrt(k) ulps.
      expect_close(y, reference(x, w, bias, std::nullopt, Tensor()), 2e-6 * std::sqrt(double(k)));
    }
  }
}

// The weight rounded to bf16 values (round to nearest even), as f32.
Tensor rounded_to_bf16(const Tensor& w) {
  std::vector<float> v = w.clone_raw().to_vector<float>();
  for (float& x : v) x = float(bf16(x));
  return Tensor::from_vector(v, w.shape());
}

// bf16 panels: the f32 product by the rounded weight, on every kernel and edge, single rows
// (decoding) included; the rounding itself is visible against the unrounded weight.
TEST(PackedLinear, Bf16PanelsMatchF64ReferenceOfRoundedWeight) {
  const int64_t shapes[][3] = {{1, 1, 1},    {1, 768, 96},   {1, 300, 145}, {3, 5, 47},
                               {9, 257, 49}, {200, 513, 145}, {17, 64, 2}};
  for (PackedKernel kernel : kernels()) {
    KernelScope scope(kernel);
    for (const auto& s : shapes) {
      const int64_t m = s[0], k = s[1], n = s[2];
      Tensor x = random({m, k}, 21, DType::f32), w = random({n, k}, 22, DType::f32);
      Tensor bias = random({n}, 23, DType::f32), residual = random({m, n}, 24, DType::f32);
      const ops::PackedWeight pw = ops::pack_weight(w, DType::bf16);
      EXPECT_EQ(pw.dtype(), DType::bf16);
      SCOPED_TRACE(std::string(name(kernel)) + " " + std::to_string(m) + "x" +
                   std::to_string(k) + "x" + std::to_string(n));
      const Tensor wr = rounded_to_bf16(w);
      Tensor y = ops::linear_packed(x, pw, bias);
      expect_close(y, reference(x, wr, bias, std::nullopt, Tensor()), 2e-6 * std::sqrt(double(k)));
      Tensor fused = ops::linear_packed(x, pw, bias, {.act = ops::UnaryOp::gelu_erf, .residual = residual});
      expect_close(fused, reference(x, wr, bias, ops::UnaryOp::gelu_erf, residual),
                   3e-6 * std::sqrt(double(k)));
    }
  }
  // Rounding to 8 significant bits moves a 768-term product by far more than f32 sums do.
  Tensor x = random({4, 768}, 25, DType::f32), w = random({96, 768}, 26, DType::f32);
  Tensor exact = reference(x, w, Tensor(), std::nullopt, Tensor());
  Tensor bf = ops::linear_packed(x, ops::pack_weight(w, DType::bf16));
  double worst = 0;
  const auto e = exact.to_vector<double>(), b = bf.to_vector<double>();
  for (size_t i = 0; i < e.size(); ++i) worst = std::max(worst, std::fabs(e[i] - b[i]));
  EXPECT_GT(worst, 1e-3);
}

TEST(PackedLinear, FusedEpiloguesMatchReference) {
  Tensor x = random({2, 37, 96}, 4, DType::f32), w = random({100, 96}, 5, DType::f32);
  Tensor bias = random({100}, 6, DType::f32), residual = random({2, 37, 100}, 7, DType::f32);
  const ops::PackedWeight pw = ops::pack_weight(w);
  for (PackedKernel kernel : kernels()) {
    KernelScope scope(kernel);
    for (auto act : {ops::UnaryOp::relu, ops::UnaryOp::gelu_erf, ops::UnaryOp::gelu_tanh,
                     ops::UnaryOp::silu}) {
      SCOPED_TRACE(name(kernel));
      Tensor y = ops::linear_packed(x, pw, bias, {.act = act, .residual = residual});
      expect_close(y, reference(x, w, bias, act, residual), 3e-5);
      Tensor no_bias = ops::linear_packed(x, pw, Tensor(), {.act = act});
      expect_close(no_bias, reference(x, w, Tensor(), act, Tensor()), 3e-5);
    }
  }
}

// The fused activation is the op's own f32 formula: equal to the unfused ops up to the GEMM's
// order of summation.
TEST(PackedLinear, FusedActivationEqualsUnfusedOps) {
  Tensor x = random({64, 768}, 8, DType::f32), w = random({192, 768}, 9, DType::f32, -0.05, 0.05);
  Tensor bias = random({192}, 10, DType::f32);
  Tensor fused = ops::linear_packed(x, ops::pack_weight(w), bias, {.act = ops::UnaryOp::gelu_tanh});
  Tensor unfused = ops::gelu(ops::linear(x, w, bias), ops::GeluApprox::tanh);
  expect_close(fused, unfused, 1e-5);
}

TEST(PackedLinear, StridedInputsWeightAndResidual) {
  Tensor wide = random({6, 40, 70}, 11, DType::f32);
  Tensor x = ops::narrow(wide, 2, 3, 64);  // rows 70 apart
  Tensor wt = random({64, 50}, 12, DType::f32);
  Tensor w = ops::transpose(wt, 0, 1);  // [50, 64], column-major
  Tensor res_base = random({40, 6, 50}, 13, DType::f32);
  Tensor residual = ops::transpose(res_base, 0, 1);  // [6, 40, 50], not row-collapsible
  Tensor y = ops::linear_packed(x, ops::pack_weight(w), Tensor(), {.residual = residual});
  expect_close(y, reference(x, w, Tensor(), std::nullopt, residual), 2e-5);
}

TEST(PackedLinear, SameBitsOnOneThreadAndTwo) {
  Tensor x = random({128, 768}, 14, DType::f32), w = random({2304, 768}, 15, DType::f32);
  const ops::PackedWeight pw = ops::pack_weight(w);
  Tensor one, two;
  {
    ThreadBudgetScope budget({{Device::cpu(0), 1}});
    one = ops::linear_packed(x, pw);
  }
  {
    ThreadBudgetScope budget({{Device::cpu(0), std::min(2, hardware_cores())}});
    two = ops::linear_packed(x, pw);
  }
  EXPECT_EQ(one.to_vector<float>(), two.to_vector<float>());
}

TEST(PackedLinear, RefusesAutogradAndMismatches) {
  Tensor w = random({8, 4}, 16, DType::f32);
  const ops::PackedWeight pw = ops::pack_weight(w);
  Tensor x = random({2, 4}, 17, DType::f32);
  x.set_requires_grad(true);
  EXPECT_THROW(ops::linear_packed(x, pw), InvalidArgument);
  {
    autograd::NoGradGuard no_grad;
    EXPECT_NO_THROW(ops::linear_packed(x, pw));
  }
  EXPECT_THROW(ops::linear_packed(random({2, 5}, 18, DType::f32), pw), InvalidArgument);
  EXPECT_THROW(ops::linear_packed(random({2, 4}, 18, DType::f32), pw, random({7}, 1, DType::f32)),
               InvalidArgument);
  EXPECT_THROW(ops::linear_packed(random({2, 4}, 18, DType::f32), pw, Tensor(),
                                  {.act = ops::UnaryOp::tanh}),
               InvalidArgument);
  EXPECT_THROW(ops::pack_weight(random({8, 4}, 1, DType::f64)), InvalidArgument);
  EXPECT_THROW(ops::pack_weight(w, DType::f16), InvalidArgument);
  EXPECT_THROW(ops::linear_packed(random({2, 4}, 18, DType::f32), ops::PackedWeight()),
               InvalidArgument);
}

}  // namespace
}  // namespace libai
