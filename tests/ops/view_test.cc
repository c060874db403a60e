#include "ops/view.h"

#include <limits>

#include "runtime/device_copy.h"
#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::expect_close;
using testing::gradcheck;
using testing::random;
using Inputs = std::vector<Tensor>;

constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

// Reference: x [2, 3, 4] read at [i][j][k] through plain index arithmetic.
double at(const std::vector<double>& v, int i, int j, int k) { return v[(i * 3 + j) * 4 + k]; }

template <typename Fn>
void expect_throw_mentioning(Fn&& fn, const std::string& needle) {
  try {
    fn();
    FAIL() << "expected InvalidArgument mentioning " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(View, ReshapeOfContiguousIsAViewAndInfersMinusOne) {
  Tensor x = random({2, 3, 4}, 1);
  Tensor y = ops::reshape(x, {4, -1});
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  EXPECT_TRUE(y.shares_storage(x));
  EXPECT_EQ(y.to_vector<double>(), x.to_vector<double>());
  Tensor z = ops::view(x, {-1});
  EXPECT_EQ(z.shape(), (Shape{24}));
  EXPECT_TRUE(z.shares_storage(x));
}

TEST(View, ViewsShareStorageAndSeeWrites) {
  Tensor x = Tensor::zeros({2, 3, 4}, DType::f64);
  std::vector<Tensor> views = {ops::permute(x, {2, 0, 1}),
                               ops::transpose(x, 0, 2),
                               ops::slice(x, 2, 1, 3),
                               ops::select(x, 1, -1),
                               ops::unsqueeze(x, 1),
                               ops::narrow(x, 1, 1, 2),
                               ops::expand(ops::unsqueeze(x, 0), {5, -1, -1, -1}),
                               ops::split(x, 2, 2)[1],
                               ops::squeeze(ops::unsqueeze(x, 3))};
  for (const Tensor& v : views) EXPECT_TRUE(v.shares_storage(x)) << shape_str(v.shape());
  // x[1, 2, 3] is element 23; select(x, 1, -1)[1, 3] reads it.
  x.data<double>()[23] = 7.0;
  EXPECT_EQ(views[3].to_vector<double>()[1 * 4 + 3], 7.0);
  EXPECT_EQ(views[0].to_vector<double>()[(3 * 2 + 1) * 3 + 2], 7.0);  // permuted [3, 1, 2]
}

TEST(View, ReshapeOfTransposedCopiesAndViewRefuses) {
  Tensor x = random({2, 3, 4}, 2);
  Tensor t = ops::transpose(x, 1, 2);  // [2, 4, 3]
  EXPECT_FALSE(t.is_contiguous());
  Tensor r = ops::reshape(t, {2, 12});
  EXPECT_FALSE(r.shares_storage(x));
  auto v = x.to_vector<double>(), rv = r.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(rv[i * 12 + k * 3 + j], at(v, i, j, k));
  expect_throw_mentioning([&] { ops::view(t, {2, 12}); }, "use reshape()");
  // Splitting a dim of the transposed tensor needs no copy.
  Tensor s = ops::view(t, {2, 2, 2, 3});
  EXPECT_TRUE(s.shares_storage(x));
  EXPECT_EQ(s.to_vector<double>(), t.to_vector<double>());
}

TEST(View, ReshapeOfColumnSliceViewsOnlyWhereStridesAllow) {
  Tensor x = random({4, 6}, 17);
  Tensor cols = ops::slice(x, 1, 0, 3);  // [4, 3], row stride 6
  Tensor split_rows = ops::reshape(cols, {2, 2, 3});
  EXPECT_TRUE(split_rows.shares_storage(x));
  EXPECT_EQ(split_rows.strides(), (Shape{12, 6, 1}));
  Tensor merged = ops::reshape(cols, {12});  // rows are not adjacent: copy
  EXPECT_FALSE(merged.shares_storage(x));
  EXPECT_EQ(merged.to_vector<double>(), cols.to_vector<double>());
  EXPECT_THROW(ops::view(cols, {12}), InvalidArgument);
  // Size-1 dims anywhere do not prevent a view.
  Tensor u = ops::view(ops::unsqueeze(cols, 1), {4, 1, 1, 3});
  EXPECT_TRUE(u.shares_storage(x));
  EXPECT_EQ(ops::slice(x, 1, 1, std::numeric_limits<int64_t>::max(), kEnd).shape(), (Shape{4, 1}));
}

TEST(View, PermuteAndContiguousMatchLoops) {
  Tensor x = random({2, 3, 4}, 3);
  Tensor p = ops::permute(x, {2, 0, -2});  // [4, 2, 3]
  ASSERT_EQ(p.shape(), (Shape{4, 2, 3}));
  Tensor c = ops::contiguous(p);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage(x));
  auto v = x.to_vector<double>();
  const double* cv = c.data<double>();
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(cv[(k * 2 + i) * 3 + j], at(v, i, j, k));
  Tensor same = ops::contiguous(x);
  EXPECT_EQ(same.impl_ptr(), x.impl_ptr());  // no copy of a contiguous tensor
}

TEST(View, SliceFollowsPythonRules) {
  Tensor x = Tensor::from_vector<double>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto values = [](const Tensor& t) { return t.to_vector<double>(); };
  EXPECT_EQ(values(ops::slice(x, 0, 2, 5)), (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(values(ops::slice(x, 0, -3, kEnd)), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(values(ops::slice(x, 0, 1, -1, 3)), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(values(ops::slice(x, 0, -100, 2)), (std::vector<double>{0, 1}));
  EXPECT_EQ(values(ops::slice(x, 0, 8, 100)), (std::vector<double>{8, 9}));
  EXPECT_EQ(ops::slice(x, 0, 6, 3).shape(), (Shape{0}));
  EXPECT_EQ(values(ops::narrow(x, 0, -4, 2)), (std::vector<double>{6, 7}));
  EXPECT_EQ(values(ops::select(x, 0, -1)), (std::vector<double>{9}));
  EXPECT_EQ(ops::select(x, 0, 3).dim(), 0);
}

TEST(View, ShapeOpsGiveExpectedShapes) {
  Tensor x = random({2, 1, 3, 1}, 4);
  EXPECT_EQ(ops::squeeze(x).shape(), (Shape{2, 3}));
  EXPECT_EQ(ops::squeeze(x, -1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(ops::squeeze(x, 0).shape(), (Shape{2, 1, 3, 1}));  // not size 1: unchanged
  EXPECT_EQ(ops::unsqueeze(x, -1).shape(), (Shape{2, 1, 3, 1, 1}));
  EXPECT_EQ(ops::unsqueeze(x, 0).shape(), (Shape{1, 2, 1, 3, 1}));
  EXPECT_EQ(ops::flatten(x).shape(), (Shape{6}));
  EXPECT_EQ(ops::flatten(random({2, 3, 4, 5}, 5), 1, 2).shape(), (Shape{2, 12, 5}));
  Tensor e = ops::expand(random({3, 1}, 6), {2, -1, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
}

TEST(View, BackwardMatchesFiniteDifferences) {
  Tensor x = random({2, 3, 4}, 7).set_requires_grad(true);
  gradcheck([](const Inputs& in) { return ops::reshape(in[0], {4, -1}); }, {x});
  gradcheck([](const Inputs& in) { return ops::reshape(ops::transpose(in[0], 0, 2), {-1}); }, {x});
  gradcheck(
      [](const Inputs& in) {
        return ops::view(ops::permute(in[0], {1, 2, 0}), {3, 2, 2, 2});
      },
      {x});
  gradcheck([](const Inputs& in) { return ops::contiguous(ops::transpose(in[0], 1, 2)); }, {x});
  gradcheck([](const Inputs& in) { return ops::slice(in[0], 2, -3, kEnd, 2); }, {x});
  gradcheck([](const Inputs& in) { return ops::narrow(in[0], 1, 1, 2); }, {x});
  gradcheck([](const Inputs& in) { return ops::select(ops::transpose(in[0], 0, 1), 2, 1); }, {x});
  gradcheck([](const Inputs& in) { return ops::squeeze(ops::unsqueeze(in[0], 1)); }, {x});
  gradcheck([](const Inputs& in) { return ops::flatten(in[0], 0, 1); }, {x});
  Tensor b = random({3, 1}, 8).set_requires_grad(true);
  gradcheck([](const Inputs& in) { return ops::expand(in[0], {2, 3, 4}); }, {b});
}

TEST(View, LowPrecisionCopiesExactly) {
  Tensor x = random({5, 6, 7}, 9);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor xl = to_dtype(x, dt);
    Tensor out = ops::contiguous(ops::slice(ops::permute(xl, {2, 0, 1}), 1, 1, 5, 2));
    Tensor ref =
        ops::contiguous(ops::slice(ops::permute(to_dtype(xl, DType::f64), {2, 0, 1}), 1, 1, 5, 2));
    EXPECT_EQ(out.dtype(), dt);
    expect_close(out, ref, 0.0, dtype_name(dt));
  }
}

TEST(View, BadArgumentsNameTheShape) {
  Tensor x = random({2, 3, 4}, 10);
  expect_throw_mentioning([&] { ops::reshape(x, {5, -1}); }, "[2, 3, 4]");
  expect_throw_mentioning([&] { ops::reshape(x, {-1, -1}); }, "more than one -1");
  expect_throw_mentioning([&] { ops::permute(x, {0, 0, 1}); }, "repeated");
  expect_throw_mentioning([&] { ops::permute(x, {0, 1}); }, "rank 3");
  expect_throw_mentioning([&] { ops::select(x, 1, 3); }, "out of range");
  expect_throw_mentioning([&] { ops::narrow(x, 2, 3, 2); }, "[2, 3, 4]");
  expect_throw_mentioning([&] { ops::expand(x, {2, 5, 4}); }, "expand");
  expect_throw_mentioning([&] { ops::slice(x, 0, 0, 1, 0); }, "step");
}

// Reference for cat along dim 1 of [2, a, 3] tensors.
TEST(Cat, ForwardMatchesLoopsAndBackward) {
  Tensor a = random({2, 1, 3}, 11).set_requires_grad(true);
  Tensor b = random({2, 4, 3}, 12).set_requires_grad(true);
  Tensor c = random({2, 2, 3}, 13);  // no gradient wanted
  Tensor out = ops::cat({a, ops::transpose(ops::transpose(b, 0, 2), 0, 2), c}, 1);
  ASSERT_EQ(out.shape(), (Shape{2, 7, 3}));
  auto av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
  auto ov = out.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 7; ++j)
      for (int k = 0; k < 3; ++k) {
        double want = j < 1   ? av[(i * 1 + j) * 3 + k]
                      : j < 5 ? bv[(i * 4 + j - 1) * 3 + k]
                              : cv[(i * 2 + j - 5) * 3 + k];
        EXPECT_EQ(ov[(i * 7 + j) * 3 + k], want);
      }
  gradcheck([](const Inputs& in) { return ops::cat({in[0], in[1], in[2]}, -2); }, {a, b, c});
  gradcheck([](const Inputs& in) { return ops::cat({in[0], in[0]}, 0); }, {a});
}

TEST(Cat, RejectsMismatchedShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 3});
  expect_throw_mentioning([&] { ops::cat({a, b}, 1); }, "[3, 3]");
  EXPECT_THROW(ops::cat({a, Tensor::zeros({2, 3}, DType::f64)}, 0), InvalidArgument);
  EXPECT_THROW(ops::cat({}, 0), InvalidArgument);
}

TEST(Split, SizesChunksAndViews) {
  Tensor x = random({3, 7}, 14);
  auto parts = ops::split(x, 3, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{3, 1}));
  for (const Tensor& p : parts) EXPECT_TRUE(p.shares_storage(x));
  auto sized = ops::split(x, std::vector<int64_t>{2, 5}, -1);
  ASSERT_EQ(sized.size(), 2u);
  auto v = x.to_vector<double>(), s1 = sized[1].to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(s1[i * 5 + j], v[i * 7 + 2 + j]);
  EXPECT_EQ(ops::chunk(x, 3, 1).size(), 3u);             // sizes 3, 3, 1
  EXPECT_EQ(ops::chunk(random({6}, 15), 4).size(), 3u);  // torch: size 2 -> 3 chunks
  EXPECT_EQ(ops::chunk(x, 3, 0)[1].shape(), (Shape{1, 7}));
  expect_throw_mentioning([&] { ops::split(x, std::vector<int64_t>{2, 2}, 1); }, "sum to 4");
}

TEST(Split, BackwardThroughPartsAndRecombination) {
  Tensor x = random({4, 6}, 16).set_requires_grad(true);
  gradcheck([](const Inputs& in) { return ops::split(in[0], 4, 1)[1]; }, {x});
  gradcheck(
      [](const Inputs& in) {
        auto p = ops::chunk(in[0], 2, 0);
        return ops::cat({p[1], p[0], p[1]}, 1);
      },
      {x});
}

}  // namespace
}  // namespace libai
