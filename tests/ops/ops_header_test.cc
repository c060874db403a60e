#include "ops/ops.h"

#include "tests/ops/gradcheck.h"

// Outside namespace libai on purpose: the operators must be found by argument-dependent
// lookup, with no using-directive.
namespace {

using libai::DType;
using libai::Tensor;

TEST(OpsHeader, OperatorsMatchElementwiseMath) {
  Tensor a = libai::testing::random({2, 3}, 1);
  Tensor b = libai::testing::random({3}, 2, DType::f64, 0.5, 2.0);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  Tensor out = (a + b) * a - a / b + 2.0 * a - 1.5 + (-a) * 0.5 + (3.0 - a) / 4.0;
  ASSERT_EQ(out.shape(), (libai::Shape{2, 3}));
  auto o = out.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      double x = av[i * 3 + j], y = bv[j];
      double want = (x + y) * x - x / y + 2.0 * x - 1.5 + (-x) * 0.5 + (3.0 - x) / 4.0;
      EXPECT_NEAR(o[i * 3 + j], want, 1e-14);
    }
}

TEST(OpsHeader, OperatorsAreDifferentiable) {
  Tensor a = libai::testing::random({4}, 3).set_requires_grad(true);
  Tensor b = libai::testing::random({4}, 4, DType::f64, 0.5, 2.0).set_requires_grad(true);
  libai::testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        return in[0] * in[1] - in[0] / in[1] + 1.0 - in[1] * 3.0;
      },
      {a, b});
}

TEST(OpsHeader, UsingDirectiveAlsoWorks) {
  using namespace libai::ops;
  Tensor x = Tensor::ones({2}, DType::f64);
  Tensor y = reshape(x + x, {2, 1});
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{2, 2}));
}

}  // namespace
