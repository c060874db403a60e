#include "ops/select.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/device_copy.h"
#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::expect_close;
using testing::gradcheck;
using testing::random;
using Inputs = std::vector<Tensor>;

// cond [3, 1], a [3, 4], b [4]: a deterministic pattern of true/false rows.
Tensor row_condition() { return Tensor::from_vector<bool>({true, false, true}, {3, 1}); }

TEST(Where, BroadcastForwardMatchesLoops) {
  Tensor a = random({3, 4}, 1), b = random({4}, 2);
  Tensor out = ops::where(row_condition(), a, b);
  ASSERT_EQ(out.shape(), (Shape{3, 4}));
  auto av = a.to_vector<double>(), bv = b.to_vector<double>(), o = out.to_vector<double>();
  const bool rows[3] = {true, false, true};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(o[i * 4 + j], rows[i] ? av[i * 4 + j] : bv[j]);
  // u8 conditions work the same; non-zero is true.
  Tensor u8 = Tensor::from_vector<uint8_t>({2, 0, 1}, {3, 1});
  expect_close(ops::where(u8, a, b), out, 0.0, "u8");
}

TEST(Where, BackwardMatchesFiniteDifferences) {
  Tensor a = random({3, 4}, 3).set_requires_grad(true);
  Tensor b = random({4}, 4).set_requires_grad(true);
  Tensor c = row_condition();
  gradcheck([&](const Inputs& in) { return ops::where(c, in[0], in[1]); }, {a, b});
}

TEST(Where, LowPrecisionAndErrors) {
  Tensor a = random({3, 4}, 5), b = random({3, 4}, 6);
  Tensor ref = ops::where(row_condition(), a, b);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor out = ops::where(row_condition(), to_dtype(a, dt), to_dtype(b, dt));
    EXPECT_EQ(out.dtype(), dt);
    expect_close(out, ref,
                 dt == DType::f32    ? 1e-7
                 : dt == DType::bf16 ? 4e-3
                                     : 1e-3,
                 dtype_name(dt));
  }
  EXPECT_THROW(ops::where(a, a, b), InvalidArgument);  // f64 condition
  EXPECT_THROW(ops::where(row_condition(), a, random({5}, 7)), InvalidArgument);
  EXPECT_THROW(ops::where(row_condition(), a, to_dtype(b, DType::f32)), InvalidArgument);
}

TEST(MaskedFill, BroadcastMaskForwardAndBackward) {
  Tensor x = random({2, 3, 3}, 8).set_requires_grad(true);
  // A causal mask [3, 3]: fill above the diagonal.
  Tensor mask = Tensor::from_vector<bool>({0, 1, 1, 0, 0, 1, 0, 0, 0}, {3, 3});
  Tensor out = ops::masked_fill(x, mask, -1e9);
  auto xv = x.to_vector<double>(), o = out.to_vector<double>();
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        EXPECT_EQ(o[(b * 3 + i) * 3 + j], j > i ? -1e9 : xv[(b * 3 + i) * 3 + j]);
  gradcheck([&](const Inputs& in) { return ops::masked_fill(in[0], mask, 3.0); }, {x});
  try {
    ops::masked_fill(random({3}, 9), mask, 0.0);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 3]"), std::string::npos) << e.what();
  }
  Tensor bf = ops::masked_fill(to_dtype(x, DType::bf16), mask, -INFINITY);
  EXPECT_TRUE(std::isinf(bf.to_vector<double>()[1]));
}

TEST(Argmax, MatchesLoopsAlongEachDim) {
  Tensor x = random({3, 4, 5}, 10);
  auto v = x.to_vector<double>();
  Tensor a1 = ops::argmax(x, 1);
  ASSERT_EQ(a1.shape(), (Shape{3, 5}));
  EXPECT_EQ(a1.dtype(), DType::i64);
  auto got = a1.to_vector<int64_t>();
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) {
      int best = 0;
      for (int j = 1; j < 4; ++j)
        if (v[(i * 4 + j) * 5 + k] > v[(i * 4 + best) * 5 + k]) best = j;
      EXPECT_EQ(got[i * 5 + k], best);
    }
  EXPECT_EQ(ops::argmax(x, -1, true).shape(), (Shape{3, 4, 1}));
  // First maximum wins; NaN counts as the maximum; integers work.
  EXPECT_EQ(ops::argmax(Tensor::from_vector<double>({1, 3, 3, 2}), 0).item<int64_t>(), 1);
  EXPECT_EQ(ops::argmax(Tensor::from_vector<double>({1, NAN, 5}), 0).item<int64_t>(), 1);
  EXPECT_EQ(ops::argmax(Tensor::from_vector<int64_t>({4, 9, -2}), 0).item<int64_t>(), 1);
  EXPECT_EQ(ops::argmax(to_dtype(x, DType::bf16), 1).dtype(), DType::i64);
  EXPECT_THROW(ops::argmax(Tensor::zeros({2, 0}), 1), InvalidArgument);
}

// Reference: a stable sort of (value, index) pairs per row.
TEST(Topk, MatchesSortedReference) {
  Tensor x = random({4, 9}, 11);
  auto v = x.to_vector<double>();
  for (bool largest : {true, false}) {
    auto [values, indices] = ops::topk(x, 3, -1, largest);
    ASSERT_EQ(values.shape(), (Shape{4, 3}));
    auto vv = values.to_vector<double>();
    auto iv = indices.to_vector<int64_t>();
    for (int r = 0; r < 4; ++r) {
      std::vector<int> order(9);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return largest ? v[r * 9 + a] > v[r * 9 + b] : v[r * 9 + a] < v[r * 9 + b];
      });
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(iv[r * 3 + j], order[j]);
        EXPECT_EQ(vv[r * 3 + j], v[r * 9 + order[j]]);
      }
    }
  }
  // Along a leading dim, with ties going to the lower index.
  Tensor t = Tensor::from_vector<double>({1, 5, 5, 2, 0, 2}, {3, 2});
  auto [tv, ti] = ops::topk(t, 2, 0);
  // Column 0 holds 1, 5, 0; column 1 holds 5, 2, 2 (the tie picks row 1, not row 2).
  EXPECT_EQ(ti.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(tv.to_vector<double>(), (std::vector<double>{5, 5, 1, 2}));
}

TEST(Topk, BackwardAndLowPrecision) {
  Tensor x = random({3, 7, 2}, 12).set_requires_grad(true);
  gradcheck([](const Inputs& in) { return ops::topk(in[0], 3, 1).first; }, {x});
  gradcheck([](const Inputs& in) { return ops::topk(in[0], 2, -1, false).first; }, {x});
  Tensor ref = ops::topk(x, 4, 1).first;
  for (DType dt : {DType::f32, DType::bf16}) {
    // Rounding may reorder near-ties, so compare the selected values only.
    Tensor out = ops::topk(to_dtype(x, dt), 4, 1).first;
    expect_close(out, ref, dt == DType::f32 ? 1e-7 : 1e-2, dtype_name(dt));
  }
  EXPECT_THROW(ops::topk(x, 8, 1), InvalidArgument);
}

TEST(Where, ComparisonsProduceBool) {
  Tensor a = Tensor::from_vector<double>({1, 2, 3}, {3, 1});
  Tensor b = Tensor::from_vector<double>({2, 1});
  // The broadcast pairs, row-major: (1,2) (1,1) (2,2) (2,1) (3,2) (3,1).
  Tensor lt = ops::lt(a, b);
  EXPECT_EQ(lt.dtype(), DType::boolean);
  EXPECT_EQ(lt.to_vector<int>(), (std::vector<int>{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ops::ge(a, b).to_vector<int>(), (std::vector<int>{0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(ops::eq(a, b).to_vector<int>(), (std::vector<int>{0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(ops::ne(a, b).to_vector<int>(), (std::vector<int>{1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(ops::gt(a, b).to_vector<int>(), (std::vector<int>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(ops::le(a, b).to_vector<int>(), (std::vector<int>{1, 1, 1, 0, 0, 0}));
  Tensor ids = Tensor::from_vector<int64_t>({3, 7});
  EXPECT_EQ(ops::eq(ids, Tensor::from_vector<int64_t>({7})).to_vector<int>(),
            (std::vector<int>{0, 1}));
  EXPECT_THROW(ops::lt(a, ids), InvalidArgument);
}

}  // namespace
}  // namespace libai
