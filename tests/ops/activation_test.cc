#include "ops/activation.h"

#include <cmath>
#include <functional>

#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::gradcheck;
using testing::random;

// Independent closed forms in f64.
double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Case {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double low, high;  // input range of the test (positive for log, sqrt, ...)
};

std::vector<Case> cases() {
  return {
      {"gelu", [](const Tensor& x) { return ops::gelu(x); }, ref_gelu, -6, 6},
      {"gelu_tanh", [](const Tensor& x) { return ops::gelu(x, ops::GeluApprox::tanh); },
       ref_gelu_tanh, -6, 6},
      {"relu", [](const Tensor& x) { return ops::relu(x); },
       [](double x) { return x > 0 ? x : 0.0; }, -2, 2},
      {"silu", [](const Tensor& x) { return ops::silu(x); },
       [](double x) { return x * ref_sigmoid(x); }, -8, 8},
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }, ref_sigmoid, -8, 8},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }, [](double x) { return std::tanh(x); },
       -3, 3},
      {"exp", [](const Tensor& x) { return ops::exp(x); }, [](double x) { return std::exp(x); }, -5,
       5},
      {"log", [](const Tensor& x) { return ops::log(x); }, [](double x) { return std::log(x); },
       0.1, 4},
      {"sqrt", [](const Tensor& x) { return ops::sqrt(x); }, [](double x) { return std::sqrt(x); },
       0.1, 4},
      {"rsqrt", [](const Tensor& x) { return ops::rsqrt(x); },
       [](double x) { return 1.0 / std::sqrt(x); }, 0.5, 4},
      {"pow_scalar", [](const Tensor& x) { return ops::pow_scalar(x, 2.5); },
       [](double x) { return std::pow(x, 2.5); }, 0.1, 3},
  };
}

Tensor reference(const Tensor& x, const std::function<double(double)>& f) {
  auto v = x.to_vector<double>();
  for (auto& e : v) e = f(e);
  return Tensor::from_vector<double>(v, x.shape());
}

TEST(Activation, ForwardMatchesClosedFormsInF64) {
  for (const Case& c : cases()) {
    Tensor x = random({7, 33}, 11, DType::f64, c.low, c.high);
    testing::expect_close(c.op(x), reference(x, c.ref), 1e-14, c.name);
  }
}

TEST(Activation, BackwardMatchesFiniteDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    // Keep relu's inputs away from its kink.
    Tensor x = random({3, 5}, 12, DType::f64, c.low, c.high);
    if (std::string(c.name) == "relu") {
      double* p = x.data<double>();
      for (int64_t i = 0; i < x.numel(); ++i)
        if (std::abs(p[i]) < 0.05) p[i] = 0.3;
    }
    x.set_requires_grad(true);
    auto op = c.op;
    gradcheck([op](const std::vector<Tensor>& in) { return op(in[0]); }, {x});
  }
}

TEST(Activation, LowPrecisionWithinTolerance) {
  for (const Case& c : cases()) {
    Tensor x = random({64, 129}, 13, DType::f64, c.low, c.high);
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      Tensor xl = to_dtype(x, dt);
      // The reference sees the rounded inputs, so only the op's own error is measured.
      Tensor ref = reference(to_dtype(xl, DType::f64), c.ref);
      Tensor out = c.op(xl);
      EXPECT_EQ(out.dtype(), dt);
      double tol = dt == DType::f32 ? 2e-6 : dt == DType::bf16 ? 1e-2 : 2e-3;
      testing::expect_close(out, ref, tol, (std::string(c.name) + " " + dtype_name(dt)).c_str());
    }
  }
}

// The vectorised f32 erf path: relative error against f64 per element, also in the tails
// where 1 + erf(x / sqrt 2) would cancel.
TEST(Activation, GeluF32RelativeErrorIsUlpLevel) {
  std::vector<float> xs;
  for (float v = -12.0f; v < 12.0f; v += 0.0037f) xs.push_back(v);
  Tensor x = Tensor::from_vector<float>(xs);
  auto got = ops::gelu(x).to_vector<float>();
  auto grad_ref = [](double v) {
    return 0.5 * std::erfc(-v / std::sqrt(2.0)) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
  };
  Tensor xg = x.clone_raw().set_requires_grad(true);
  Tensor y = ops::gelu(xg);
  auto dx = autograd::grad(y, {xg}, Tensor::ones(y.shape()))[0].to_vector<float>();
  double worst = 0, worst_grad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    double r = 0.5 * xs[i] * std::erfc(-xs[i] / std::sqrt(2.0));  // no cancellation
    if (std::abs(r) > 1e-30) worst = std::max(worst, std::abs(got[i] - r) / std::abs(r));
    worst_grad = std::max(worst_grad, std::abs(dx[i] - grad_ref(xs[i])));
  }
  EXPECT_LT(worst, 8 * 6e-8);  // a few ulp
  EXPECT_LT(worst_grad, 1e-6);
}

// The vectorised f32 exp (ops/cpu/vector_math.h): ulp error against f64 over its whole
// normal range, in full vectors and in a padded tail; results below e^-86 flush to 0.
TEST(Activation, ExpF32IsUlpLevelAndFlushesTinyResults) {
  std::vector<float> xs;
  for (float v = -86.0f; v < 88.72f; v += 0.00731f) xs.push_back(v);
  xs.resize(xs.size() / 16 * 16 + 7);  // a partial last vector
  const auto got = ops::exp(Tensor::from_vector<float>(xs)).to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double e = std::exp(double(xs[i]));
    const double ulp = std::ldexp(1.0, std::ilogb(e) - 23);
    worst = std::max(worst, std::abs(got[i] - e) / ulp);
  }
  EXPECT_LE(worst, 1.5);
  const auto edge = ops::exp(Tensor::from_vector<float>({-86.5f, -85.9f, 88.72f, 88.73f, -INFINITY}))
                        .to_vector<float>();
  EXPECT_EQ(edge[0], 0.0f);  // e^-86.5 = 2.7e-38: flushed
  EXPECT_NEAR(edge[1] / std::exp(double(-85.9f)), 1.0, 1e-6);
  EXPECT_TRUE(std::isfinite(edge[2]));
  EXPECT_TRUE(std::isinf(edge[3]));
  EXPECT_EQ(edge[4], 0.0f);
}

TEST(Activation, StridedInputAndSpecialValues) {
  Tensor x = random({4, 6}, 14, DType::f64);
  Tensor t = x.as_strided({6, 4}, {1, 6}, 0);  // a transposed view
  testing::expect_close(ops::silu(t), reference(t, [](double v) { return v * ref_sigmoid(v); }),
                        1e-14, "strided silu");
  auto e = ops::exp(Tensor::from_vector<float>({-200.f, 100.f, 0.f, NAN})).to_vector<float>();
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_TRUE(std::isinf(e[1]));
  EXPECT_EQ(e[2], 1.0f);
  EXPECT_TRUE(std::isnan(e[3]));
  auto g = ops::gelu(Tensor::from_vector<float>({-100.f, 100.f})).to_vector<float>();
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_EQ(g[1], 100.0f);
}

TEST(Activation, RejectsIntegerTensors) {
  try {
    ops::gelu(Tensor::zeros({2, 3}, DType::i64));
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("gelu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace libai
