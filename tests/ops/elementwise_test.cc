#include "ops/elementwise.h"

#include <algorithm>

#include "ops/reduce.h"
#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::gradcheck;
using testing::random;

// Reference: plain loops over broadcast indices in f64.
Tensor reference_binary(const Tensor& a, const Tensor& b, char op) {
  Tensor out = Tensor::empty({2, 3, 4}, DType::f64);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double* o = out.data<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        double x = av[(i * 3 + j) * 4 + k];  // a is [2, 3, 4]
        double y = bv[j];                    // b is [3, 1]
        o[(i * 3 + j) * 4 + k] = op == '+' ? x + y : op == '-' ? x - y : op == '*' ? x * y : x / y;
      }
  return out;
}

TEST(Elementwise, BroadcastForwardMatchesLoops) {
  Tensor a = random({2, 3, 4}, 1), b = random({3, 1}, 2, DType::f64, 0.5, 2.0);
  testing::expect_close(ops::add(a, b), reference_binary(a, b, '+'), 1e-15, "add");
  testing::expect_close(ops::sub(a, b), reference_binary(a, b, '-'), 1e-15, "sub");
  testing::expect_close(ops::mul(a, b), reference_binary(a, b, '*'), 1e-15, "mul");
  testing::expect_close(ops::div(a, b), reference_binary(a, b, '/'), 1e-15, "div");
}

TEST(Elementwise, BackwardMatchesFiniteDifferences) {
  Tensor a = random({2, 3, 4}, 3).set_requires_grad(true);
  Tensor b = random({3, 1}, 4, DType::f64, 0.5, 2.0).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); }, {a, b});
  gradcheck([](const std::vector<Tensor>& in) { return ops::sub(in[0], in[1]); }, {a, b});
  gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, {a, b});
  gradcheck([](const std::vector<Tensor>& in) { return ops::div(in[0], in[1]); }, {a, b});
  gradcheck([](const std::vector<Tensor>& in) { return ops::scale(in[0], -2.5); }, {a});
}

TEST(Elementwise, LowPrecisionWithinTolerance) {
  Tensor a = random({64, 33}, 5), b = random({33}, 6);
  Tensor ref = ops::mul(a, b);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor out = ops::mul(to_dtype(a, dt), to_dtype(b, dt));
    EXPECT_EQ(out.dtype(), dt);
    double tol = dt == DType::f32 ? 1e-6 : dt == DType::bf16 ? 1e-2 : 2e-3;
    testing::expect_close(out, ref, tol, dtype_name(dt));
  }
}

TEST(Elementwise, ErrorsNameShapesAndDtypes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  try {
    ops::add(a, b);
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3] and [4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::add(a, Tensor::zeros({2, 3}, DType::f64)), InvalidArgument);
}

TEST(Reduce, SumMeanMaxForwardAndBackward) {
  Tensor x = random({3, 4, 5}, 7).set_requires_grad(true);
  auto v = x.to_vector<double>();
  Tensor s = ops::sum(x, {1});
  ASSERT_EQ(s.shape(), (Shape{3, 5}));
  double expect = 0;
  for (int j = 0; j < 4; ++j) expect += v[(1 * 4 + j) * 5 + 2];
  EXPECT_NEAR(s.to_vector<double>()[1 * 5 + 2], expect, 1e-14);
  gradcheck([](const std::vector<Tensor>& in) { return ops::sum(in[0], {0, 2}, true); }, {x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::mean(in[0], {-1}); }, {x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::max(in[0], 1).first; }, {x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::sum_all(in[0]); }, {x});
  EXPECT_EQ(ops::max_all(x).item<double>(), *std::max_element(v.begin(), v.end()));
  gradcheck([](const std::vector<Tensor>& in) { return ops::max_all(in[0]); }, {x});
  EXPECT_THROW(ops::max_all(Tensor::zeros({0, 3}, DType::f64)), InvalidArgument);
}

TEST(Autograd, AccumulatesAcrossUsesAndCallsHooksOnce) {
  Tensor x = random({4}, 8).set_requires_grad(true);
  int calls = 0;
  x.add_grad_ready_hook([&](const Tensor& g) {
    ++calls;
    EXPECT_EQ(g.numel(), 4);
  });
  Tensor y = ops::add(ops::mul(x, x), x);  // dy/dx = 2x + 1
  autograd::backward(ops::sum_all(y));
  EXPECT_EQ(calls, 1);
  auto g = x.grad().to_vector<double>(), xv = x.to_vector<double>();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(g[i], 2 * xv[i] + 1, 1e-14);
  autograd::backward(ops::sum_all(x));  // accumulates into .grad
  g = x.grad().to_vector<double>();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(g[i], 2 * xv[i] + 2, 1e-14);
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = random({4}, 9).set_requires_grad(true);
  autograd::NoGradGuard guard;
  Tensor y = ops::mul(x, x);
  EXPECT_TRUE(y.is_leaf());
  EXPECT_FALSE(y.requires_grad());
}

}  // namespace
}  // namespace libai
