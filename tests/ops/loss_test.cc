#include "ops/loss.h"

#include <cmath>

#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using ops::Reduction;
using testing::gradcheck;
using testing::random;

// Per-row losses in f64 from the definition: -sum_c q_c log p_c, q = (1 - eps) onehot + eps / C.
std::vector<double> reference_rows(const Tensor& logits, const std::vector<int64_t>& target,
                                   double eps, int64_t ignore = -100) {
  const int64_t c = logits.shape().back(), n = int64_t(target.size());
  auto v = logits.to_vector<double>();
  std::vector<double> out(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore) continue;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(v[i * c + j]);
    for (int64_t j = 0; j < c; ++j) {
      double q = (j == target[i] ? 1.0 - eps : 0.0) + eps / double(c);
      out[i] -= q * (v[i * c + j] - std::log(sum));
    }
  }
  return out;
}

TEST(Loss, CrossEntropyMatchesDefinition) {
  Tensor logits = random({6, 11}, 61, DType::f64, -3, 3);
  std::vector<int64_t> t = {3, 0, -100, 10, 5, -100};
  Tensor target = Tensor::from_vector<int64_t>(t);
  auto rows = reference_rows(logits, t, 0.0);
  double sum = 0;
  for (double r : rows) sum += r;
  Tensor none = ops::cross_entropy(logits, target, {.reduction = Reduction::none});
  testing::expect_close(none, Tensor::from_vector<double>(rows), 1e-14, "none");
  EXPECT_NEAR(ops::cross_entropy(logits, target, {.reduction = Reduction::sum}).item<double>(), sum,
              1e-13);
  EXPECT_NEAR(ops::cross_entropy(logits, target).item<double>(), sum / 4, 1e-13);  // 4 not ignored
  auto smooth = reference_rows(logits, t, 0.2);
  double smooth_sum = 0;
  for (double r : smooth) smooth_sum += r;
  EXPECT_NEAR(ops::cross_entropy(logits, target, {.label_smoothing = 0.2}).item<double>(),
              smooth_sum / 4, 1e-13);
  // Another ignore_index, and extreme logits (stable log-softmax).
  std::vector<int64_t> t2 = {1, 2, 0, 7, 7, 4};
  Tensor big =
      ops::cross_entropy(Tensor::from_vector<double>(std::vector<double>(66, 0.0), {6, 11}),
                         Tensor::from_vector<int64_t>(t2), {.ignore_index = 7});
  EXPECT_NEAR(big.item<double>(), std::log(11.0), 1e-14);
  Tensor huge = random({2, 5}, 62, DType::f32, 1e4, 2e4);
  EXPECT_TRUE(
      std::isfinite(ops::cross_entropy(huge, Tensor::from_vector<int64_t>({0, 4})).item<double>()));
}

TEST(Loss, MultiDimTargetsAndAllIgnored) {
  Tensor logits = random({2, 3, 5}, 63, DType::f64);
  std::vector<int64_t> t = {0, 1, 2, 3, 4, -100};
  Tensor per = ops::cross_entropy(logits, Tensor::from_vector<int64_t>(t, {2, 3}),
                                  {.reduction = Reduction::none});
  ASSERT_EQ(per.shape(), (Shape{2, 3}));
  testing::expect_close(per, Tensor::from_vector<double>(reference_rows(logits, t, 0.0), {2, 3}),
                        1e-14, "[2, 3]");
  Tensor ignored = Tensor::full({2, 3}, -100, DType::i64);
  Tensor x = logits.clone_raw().set_requires_grad(true);
  Tensor loss = ops::cross_entropy(x, ignored);
  EXPECT_EQ(loss.item<double>(), 0.0);
  autograd::backward(loss);
  for (double g : x.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
}

TEST(Loss, BackwardMatchesFiniteDifferences) {
  Tensor x = random({5, 7}, 64, DType::f64, -2, 2).set_requires_grad(true);
  Tensor t = Tensor::from_vector<int64_t>({6, -100, 0, 3, 3});
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none})
    for (double eps : {0.0, 0.1}) {
      SCOPED_TRACE(int(r) * 10 + int(eps * 10));
      gradcheck(
          [&](const std::vector<Tensor>& in) {
            return ops::cross_entropy(in[0], t, {.reduction = r, .label_smoothing = eps});
          },
          {x});
    }
}

TEST(Loss, LowPrecisionWithinTolerance) {
  Tensor x = random({40, 1000}, 65, DType::f64, -4, 4);
  std::vector<int64_t> tv(40);
  for (int i = 0; i < 40; ++i) tv[i] = i % 7 == 3 ? -100 : (i * 37) % 1000;
  Tensor t = Tensor::from_vector<int64_t>(tv);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor xl = to_dtype(x, dt), xr = to_dtype(xl, DType::f64);
    double tol = dt == DType::f32 ? 1e-6 : dt == DType::bf16 ? 1e-2 : 2e-3;
    Tensor a = xr.clone_raw().set_requires_grad(true), b = xl.clone_raw().set_requires_grad(true);
    Tensor ref = ops::cross_entropy(a, t, {.label_smoothing = 0.1});
    Tensor got = ops::cross_entropy(b, t, {.label_smoothing = 0.1});
    EXPECT_EQ(got.dtype(), dt);
    testing::expect_close(got, ref, tol, dtype_name(dt));
    autograd::backward(ref);
    autograd::backward(got);
    testing::expect_close(b.grad(), a.grad(), tol, dtype_name(dt));
  }
}

TEST(Loss, BadTargetsNameValueAndPosition) {
  Tensor logits = Tensor::zeros({2, 3, 4});
  try {
    ops::cross_entropy(logits, Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 1}, {2, 3}));
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("target value 4 at position [1, 1]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 4)"), std::string::npos) << msg;
  }
  EXPECT_THROW(
      ops::cross_entropy(logits, Tensor::from_vector<int64_t>({-1, 0, 0, 0, 0, 0}, {2, 3})),
      InvalidArgument);
  EXPECT_THROW(ops::cross_entropy(logits, Tensor::zeros({3, 2}, DType::i64)), InvalidArgument);
  EXPECT_THROW(ops::cross_entropy(logits, Tensor::zeros({2, 3}, DType::f32)), InvalidArgument);
}

}  // namespace
}  // namespace libai
