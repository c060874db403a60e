#include "ops/softmax.h"

#include <cmath>

#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::gradcheck;
using testing::random;

// Plain-loop reference over [batch, heads, rows, cols] (heads may be 1), f64.
Tensor reference(const Tensor& x, bool log, bool causal, const std::vector<int>& pad = {}) {
  const Shape& s = x.shape();
  const int64_t cols = s.back(), rows = s[s.size() - 2], total_rows = x.numel() / cols;
  const int64_t per_batch = x.numel() / (s[0] * cols);
  auto v = x.to_vector<double>();
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < total_rows; ++r) {
    const int64_t i = r % rows, b = r / per_batch;
    auto keep = [&](int64_t j) {
      if (causal && j > i + (cols - rows)) return false;
      return pad.empty() || pad[b * cols + j] == 0;
    };
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < cols; ++j)
      if (keep(j)) m = std::max(m, v[r * cols + j]);
    for (int64_t j = 0; j < cols; ++j)
      if (keep(j)) sum += std::exp(v[r * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) {
      double p = keep(j) ? std::exp(v[r * cols + j] - m) / sum : 0.0;
      out[r * cols + j] = log ? std::log(p) : p;
    }
  }
  return Tensor::from_vector<double>(out, s);
}

// -inf (masked log-probabilities) as a finite marker, so that expect_close can compare.
Tensor finite(const Tensor& t) {
  auto v = t.to_vector<double>();
  for (auto& e : v) e = std::isinf(e) && e < 0 ? -1.0 : e;
  return Tensor::from_vector<double>(v, t.shape());
}

TEST(Softmax, ForwardMatchesLoops) {
  Tensor x = random({3, 2, 5, 37}, 21, DType::f64, -4, 4);
  testing::expect_close(ops::softmax(x), reference(x, false, false), 1e-14, "softmax");
  testing::expect_close(ops::log_softmax(x), reference(x, true, false), 1e-14, "log_softmax");
  // Large offsets must not overflow (stable form).
  Tensor big = random({2, 2, 3, 5}, 22, DType::f64, 1000, 1010);
  testing::expect_close(ops::softmax(big), reference(big, false, false), 1e-14, "shifted");
}

TEST(Softmax, CausalAndPaddingMasks) {
  // cols > rows: a query block at the end of a longer key sequence.
  Tensor x = random({2, 3, 4, 6}, 23, DType::f64, -3, 3);
  testing::expect_close(ops::softmax(x, -1, {.causal = true}), reference(x, false, true), 1e-14,
                        "causal");
  std::vector<int> pad = {0, 0, 0, 0, 1, 1,   // batch 0: last two keys padded
                          1, 0, 0, 0, 0, 0};  // batch 1: first key padded
  Tensor mask = Tensor::from_vector<int64_t>({0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0}, {2, 6});
  testing::expect_close(ops::softmax(x, -1, {.key_padding_mask = mask}),
                        reference(x, false, false, pad), 1e-14, "padding");
  Tensor bool_mask = to_dtype(mask, DType::boolean);
  Tensor both = ops::softmax(x, -1, {.causal = true, .key_padding_mask = bool_mask});
  testing::expect_close(both, reference(x, false, true, pad), 1e-14, "causal + padding");
  // Row 0 of batch 1 sees keys 0..2 under the causal rule and key 0 is padded: not fully
  // masked. A fully masked row: cols < rows makes the first rows see nothing.
  Tensor tall = random({1, 5, 3}, 24, DType::f64);
  auto p = ops::softmax(tall, -1, {.causal = true}).to_vector<double>();
  for (int j = 0; j < 6; ++j) EXPECT_EQ(p[j], 0.0) << j;  // rows 0 and 1: zeros, not NaN
  EXPECT_NEAR(p[6], 1.0, 1e-15);
  auto lp = ops::log_softmax(tall, -1, {.causal = true}).to_vector<double>();
  EXPECT_TRUE(std::isinf(lp[0]) && lp[0] < 0);
  testing::expect_close(finite(ops::log_softmax(x, -1, {.causal = true, .key_padding_mask = mask})),
                        finite(reference(x, true, true, pad)), 1e-14, "log causal + padding");
}

TEST(Softmax, OtherDimThroughTransposedPath) {
  Tensor x = random({4, 3, 5}, 25, DType::f64);
  auto v = x.to_vector<double>();
  auto got = ops::softmax(x, 1).to_vector<double>();
  for (int a = 0; a < 4; ++a)
    for (int c = 0; c < 5; ++c) {
      double sum = 0;
      for (int b = 0; b < 3; ++b) sum += std::exp(v[(a * 3 + b) * 5 + c]);
      for (int b = 0; b < 3; ++b)
        EXPECT_NEAR(got[(a * 3 + b) * 5 + c], std::exp(v[(a * 3 + b) * 5 + c]) / sum, 1e-15);
    }
  Tensor xg = x.clone_raw().set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::softmax(in[0], 1); }, {xg});
  gradcheck([](const std::vector<Tensor>& in) { return ops::log_softmax(in[0], 0); }, {xg});
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  Tensor x = random({2, 2, 3, 5}, 26, DType::f64, -2, 2).set_requires_grad(true);
  Tensor mask = Tensor::from_vector<uint8_t>({0, 0, 0, 1, 1, 1, 0, 0, 0, 0}, {2, 5});
  gradcheck([](const std::vector<Tensor>& in) { return ops::softmax(in[0]); }, {x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::log_softmax(in[0]); }, {x});
  gradcheck(
      [&](const std::vector<Tensor>& in) {
        return ops::softmax(in[0], -1, {.causal = true, .key_padding_mask = mask});
      },
      {x});
  // log_softmax with masks: weight only finite outputs (the -inf entries are constant).
  gradcheck(
      [&](const std::vector<Tensor>& in) {
        Tensor l = ops::log_softmax(in[0], -1, {.key_padding_mask = mask});
        return ops::softmax(l, -1);  // exp(-inf) = 0 keeps the check finite
      },
      {x});
}

TEST(Softmax, LowPrecisionWithinTolerance) {
  Tensor x = random({2, 3, 7, 130}, 27, DType::f64, -5, 5);
  Tensor mask = Tensor::zeros({2, 130}, DType::boolean);
  mask.data<bool>()[129] = mask.data<bool>()[259] = true;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor xl = to_dtype(x, dt), xr = to_dtype(xl, DType::f64);
    double tol = dt == DType::f32 ? 1e-6 : dt == DType::bf16 ? 1e-2 : 2e-3;
    std::vector<int> pad(260, 0);
    pad[129] = pad[259] = 1;
    testing::expect_close(ops::softmax(xl, -1, {.causal = true, .key_padding_mask = mask}),
                          reference(xr, false, true, pad), tol, dtype_name(dt));
    testing::expect_close(ops::log_softmax(xl), reference(xr, true, false),
                          dt == DType::f32    ? 1e-6
                          : dt == DType::bf16 ? 2e-2
                                              : 4e-3,
                          dtype_name(dt));
    // Backward in low precision against the f64 backward.
    Tensor g = random(x.shape(), 28, DType::f64);
    Tensor a = xr.clone_raw().set_requires_grad(true);
    Tensor ref = autograd::grad(ops::softmax(a), {a}, g)[0];
    Tensor b = xl.clone_raw().set_requires_grad(true);
    Tensor got = autograd::grad(ops::softmax(b), {b}, to_dtype(g, dt))[0];
    EXPECT_EQ(got.dtype(), dt);
    testing::expect_close(got, ref, tol * 2, dtype_name(dt));
  }
}

TEST(Softmax, BadMasksNameShapes) {
  Tensor x = Tensor::zeros({2, 4, 6});
  try {
    ops::softmax(x, -1, {.key_padding_mask = Tensor::zeros({2, 5}, DType::boolean)});
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[2, 5]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 4, 6]"), std::string::npos) << msg;
  }
  EXPECT_THROW(ops::softmax(x, 1, {.causal = true}), InvalidArgument);
  EXPECT_THROW(ops::softmax(Tensor::zeros({6}), -1, {.causal = true}), InvalidArgument);
  EXPECT_THROW(ops::softmax(Tensor::zeros({2, 3}, DType::i64)), InvalidArgument);
}

}  // namespace
}  // namespace libai
