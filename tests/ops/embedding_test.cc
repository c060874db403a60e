#include "ops/embedding.h"

#include "runtime/device_copy.h"
#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::expect_close;
using testing::gradcheck;
using testing::random;
using Inputs = std::vector<Tensor>;

// Reference: out[p, h] = weight[ids[p], h] by plain loops.
Tensor reference_lookup(const Tensor& weight, const std::vector<int64_t>& ids, Shape shape) {
  const int64_t hidden = weight.shape()[1];
  auto w = weight.to_vector<double>();
  shape.push_back(hidden);
  Tensor out = Tensor::empty(shape, DType::f64);
  double* o = out.data<double>();
  for (size_t p = 0; p < ids.size(); ++p)
    for (int64_t h = 0; h < hidden; ++h) o[p * hidden + h] = w[ids[p] * hidden + h];
  return out;
}

TEST(Embedding, ForwardMatchesLoopsForBothIdTypes) {
  Tensor w = random({7, 5}, 1);
  std::vector<int64_t> ids = {3, 0, 6, 3, 1, 3};
  Tensor ref = reference_lookup(w, ids, {2, 3});
  expect_close(ops::embedding(w, Tensor::from_vector<int64_t>(ids, {2, 3})), ref, 0.0, "i64");
  std::vector<int32_t> ids32(ids.begin(), ids.end());
  expect_close(ops::embedding(w, Tensor::from_vector<int32_t>(ids32, {2, 3})), ref, 0.0, "i32");
}

TEST(Embedding, BackwardAccumulatesRepeatedIds) {
  Tensor w = random({6, 4}, 2).set_requires_grad(true);
  Tensor ids = Tensor::from_vector<int64_t>({2, 5, 2, 2, 0}, {5});
  gradcheck([&](const Inputs& in) { return ops::embedding(in[0], ids); }, {w});
  // Closed form: grad[v] = sum of upstream rows whose id is v.
  Tensor upstream = random({5, 4}, 3);
  auto g = autograd::grad(ops::embedding(w, ids), {w}, upstream)[0].to_vector<double>();
  auto u = upstream.to_vector<double>();
  for (int h = 0; h < 4; ++h) {
    EXPECT_NEAR(g[2 * 4 + h], u[0 * 4 + h] + u[2 * 4 + h] + u[3 * 4 + h], 1e-15);
    EXPECT_EQ(g[1 * 4 + h], 0.0);
  }
}

TEST(Embedding, PaddingRowGetsNoGradient) {
  Tensor w = random({5, 3}, 4).set_requires_grad(true);
  Tensor ids = Tensor::from_vector<int64_t>({1, 0, 4, 0, 1}, {5});
  Tensor out = ops::embedding(w, ids, /*padding_idx=*/0);
  expect_close(out, reference_lookup(w, {1, 0, 4, 0, 1}, {5}), 0.0, "padding forward");
  auto g = autograd::grad(out, {w}, Tensor::ones({5, 3}, DType::f64))[0].to_vector<double>();
  for (int h = 0; h < 3; ++h) {
    EXPECT_EQ(g[0 * 3 + h], 0.0);
    EXPECT_EQ(g[1 * 3 + h], 2.0);
    EXPECT_EQ(g[4 * 3 + h], 1.0);
  }
  // -1 means the last row.
  auto g4 = autograd::grad(ops::embedding(w, ids, -1), {w}, Tensor::ones({5, 3}, DType::f64))[0]
                .to_vector<double>();
  EXPECT_EQ(g4[4 * 3], 0.0);
  EXPECT_EQ(g4[0 * 3], 2.0);
}

TEST(Embedding, LowPrecisionForwardAndBackward) {
  // Many repeats of one id: the accumulation must not happen in 16-bit precision.
  Tensor w = random({9, 16}, 5);
  std::vector<int64_t> idv(300);
  for (size_t p = 0; p < idv.size(); ++p) idv[p] = p % 3 == 0 ? 4 : int64_t(p % 9);
  Tensor ids = Tensor::from_vector<int64_t>(idv, {300});
  Tensor upstream = random({300, 16}, 6);
  Tensor w64 = w.clone_raw().set_requires_grad(true);
  Tensor ref_grad = autograd::grad(ops::embedding(w64, ids), {w64}, upstream)[0];
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor wl = to_dtype(w, dt).set_requires_grad(true);
    Tensor out = ops::embedding(wl, ids);
    EXPECT_EQ(out.dtype(), dt);
    expect_close(out, reference_lookup(to_dtype(wl, DType::f64), idv, {300}), 0.0, dtype_name(dt));
    Tensor g = autograd::grad(out, {wl}, to_dtype(upstream, dt))[0];
    double tol = dt == DType::f32 ? 1e-6 : dt == DType::bf16 ? 1e-2 : 2e-3;
    expect_close(g, ref_grad, tol, dtype_name(dt));
  }
}

TEST(Embedding, OutOfRangeIdNamesIdPositionAndVocab) {
  Tensor w = random({10, 2}, 7);
  Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3, 10}, {2, 2});
  try {
    ops::embedding(w, ids);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("id 10"), std::string::npos) << m;
    EXPECT_NE(m.find("[1, 1]"), std::string::npos) << m;
    EXPECT_NE(m.find("10 rows"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::embedding(w, Tensor::from_vector<int64_t>({-1})), InvalidArgument);
  EXPECT_THROW(ops::embedding(w, Tensor::from_vector<double>({1.0})), InvalidArgument);
  EXPECT_THROW(ops::embedding(random({10}, 8), ids), InvalidArgument);
  EXPECT_THROW(ops::embedding(w, Tensor::from_vector<int64_t>({1}), 10), InvalidArgument);
}

TEST(Embedding, IndexSelectAlongMiddleDim) {
  Tensor x = random({2, 5, 3}, 9).set_requires_grad(true);
  Tensor ids = Tensor::from_vector<int64_t>({4, 0, 4});
  Tensor out = ops::index_select(x, 1, ids);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 3}));
  auto v = x.to_vector<double>(), o = out.to_vector<double>();
  const int pick[3] = {4, 0, 4};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) EXPECT_EQ(o[(i * 3 + j) * 3 + k], v[(i * 5 + pick[j]) * 3 + k]);
  gradcheck([&](const Inputs& in) { return ops::index_select(in[0], 1, ids); }, {x});
  gradcheck([&](const Inputs& in) { return ops::index_select(in[0], -1, ids.clone_raw()); },
            {random({4, 5}, 10).set_requires_grad(true)});
  EXPECT_THROW(ops::index_select(x, 2, ids), InvalidArgument);  // id 4 >= 3
}

}  // namespace
}  // namespace libai
