#include "ops/dropout.h"

#include "ops/view.h"
#include "runtime/threads.h"
#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::random;

// Kept positions of ops::dropout(ones).
std::vector<bool> kept(const Tensor& y) {
  std::vector<bool> out;
  for (double v : y.to_vector<double>()) out.push_back(v != 0.0);
  return out;
}

TEST(Dropout, MaskIsAFunctionOfKeyAndIndex) {
  Tensor x = Tensor::ones({64, 100});
  RngKey key{1234, stream_id("h.0.attn.dropout")};
  Tensor a = ops::dropout(x, 0.3, key), b = ops::dropout(x, 0.3, key);
  EXPECT_EQ(kept(a), kept(b));
  // Independent of the thread count.
  const int budget = thread_budget(Device::cpu(0));
  set_thread_budget(Device::cpu(0), 1);
  Tensor c = ops::dropout(x, 0.3, key);
  set_thread_budget(Device::cpu(0), budget);
  EXPECT_EQ(kept(a), kept(c));
  // Matches uniform(key, i) >= p element by element, scaled by 1 / (1 - p).
  auto av = a.to_vector<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = uniform(key, uint64_t(i)) >= 0.3f;
    ASSERT_FLOAT_EQ(av[i], keep ? float(1.0 / 0.7) : 0.0f) << i;
  }
  EXPECT_NE(kept(a), kept(ops::dropout(x, 0.3, derive(key, 1))));            // another micro-batch
  EXPECT_NE(kept(a), kept(ops::dropout(x, 0.3, RngKey{1235, key.stream})));  // another seed
}

TEST(Dropout, RateIsAboutP) {
  Tensor x = Tensor::ones({200, 500});
  for (double p : {0.1, 0.5, 0.9}) {
    auto k = kept(ops::dropout(x, p, RngKey{7, 9}));
    double dropped = 0;
    for (bool v : k) dropped += v ? 0 : 1;
    dropped /= double(k.size());
    EXPECT_NEAR(dropped, p, 0.005) << p;  // 100k draws: 4 sigma is below 0.0064 at p = 0.5
  }
}

TEST(Dropout, IdentityWhenNotTrainingAndEdgeRates) {
  Tensor x = random({3, 4}, 51, DType::f32);
  EXPECT_TRUE(ops::dropout(x, 0.5, RngKey{1, 2}, false).shares_storage(x));
  EXPECT_TRUE(ops::dropout(x, 0.0, RngKey{1, 2}).shares_storage(x));
  for (float v : ops::dropout(x, 1.0, RngKey{1, 2}).to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(ops::dropout(x, 1.5, RngKey{1, 2}), InvalidArgument);
  EXPECT_THROW(ops::dropout(Tensor::zeros({2}, DType::i64), 0.1, RngKey{1, 2}), InvalidArgument);
}

TEST(Dropout, BackwardMatchesFiniteDifferencesWithFixedKey) {
  Tensor x = random({6, 7}, 52).set_requires_grad(true);
  RngKey key{99, 3};
  testing::gradcheck([key](const std::vector<Tensor>& in) { return ops::dropout(in[0], 0.4, key); },
                     {x});
  // The gradient uses the forward's mask.
  Tensor y = ops::dropout(x, 0.4, key);
  Tensor g = autograd::grad(y, {x}, Tensor::ones(y.shape(), DType::f64))[0];
  auto yv = y.to_vector<double>(), gv = g.to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(yv[i] == 0.0, gv[i] == 0.0) << i;
}

TEST(Dropout, LowPrecisionKeepsTheSameMask) {
  Tensor x = random({16, 33}, 53, DType::f64, 0.5, 1.5);
  RngKey key{5, 6};
  Tensor ref = ops::dropout(x, 0.2, key);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor out = ops::dropout(to_dtype(x, dt), 0.2, key);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_EQ(kept(out), kept(ref));
    testing::expect_close(out, ref,
                          dt == DType::f32    ? 1e-6
                          : dt == DType::bf16 ? 1e-2
                                              : 2e-3,
                          dtype_name(dt));
  }
}

// Note [Dropout of a slice]: element (i, j, k) of a block at `starts` of a logical [*, J, K]
// tensor draws counter ((i + s0) * J + j + s1) * K + k + s2, checked against uniform() here.
TEST(Dropout, SliceDrawsTheLogicalTensorsCounters) {
  Tensor x = random({3, 4, 5}, 54, DType::f32, 0.5, 1.5);
  RngKey key{11, stream_id("layers.0.attention.probs_dropout")};
  const int64_t s0 = 7, s1 = 2, s2 = 1, J = 9, K = 8;
  Tensor y = ops::dropout(x, 0.3, key, true, {.starts = {s0, s1, s2}, .logical_shape = {0, J, K}});
  auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
  int64_t dropped = 0;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 5; ++k) {
        const uint64_t counter = uint64_t(((i + s0) * J + j + s1) * K + k + s2);
        const int64_t e = (i * 4 + j) * 5 + k;
        const bool keep = uniform(key, counter) >= 0.3f;
        dropped += !keep;
        ASSERT_EQ(yv[size_t(e)], keep ? float(xv[size_t(e)] * float(1.0 / 0.7)) : 0.0f) << e;
      }
  EXPECT_GT(dropped, 0);
  // No slice: the same mask as the plain overload, also for a non-contiguous input.
  Tensor t = ops::transpose(x, 0, 2);
  EXPECT_EQ(ops::dropout(t, 0.3, key, true, {}).to_vector<float>(),
            ops::dropout(t, 0.3, key).to_vector<float>());
  // Two halves of the logical tensor make the whole, bitwise.
  Tensor whole = ops::dropout(x, 0.3, key, true, {});
  Tensor left = ops::dropout(ops::slice(x, 1, 0, 2), 0.3, key, true, {.logical_shape = {0, 4, 0}});
  Tensor right = ops::dropout(ops::slice(x, 1, 2, 4), 0.3, key, true,
                              {.starts = {0, 2, 0}, .logical_shape = {0, 4, 0}});
  EXPECT_EQ(ops::cat({left, right}, 1).to_vector<float>(), whole.to_vector<float>());
  EXPECT_THROW(ops::dropout(x, 0.3, key, true, {.starts = {0, 3, 0}, .logical_shape = {0, 4, 0}}),
               InvalidArgument);
  EXPECT_THROW(ops::dropout(x, 0.3, key, true, {.starts = {0, 0}}), InvalidArgument);
}

TEST(Dropout, SliceBackwardRegeneratesTheMask) {
  Tensor x = random({4, 6}, 55).set_requires_grad(true);
  RngKey key{3, 4};
  ops::DropoutSlice slice{.starts = {2, 6}, .logical_shape = {0, 12}};
  testing::gradcheck(
      [key, slice](const std::vector<Tensor>& in) {
        return ops::dropout(in[0], 0.4, key, true, slice);
      },
      {x});
  Tensor y = ops::dropout(x, 0.4, key, true, slice);
  Tensor g = autograd::grad(y, {x}, Tensor::ones(y.shape(), DType::f64))[0];
  auto yv = y.to_vector<double>(), gv = g.to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(yv[i] == 0.0, gv[i] == 0.0) << i;
}

}  // namespace
}  // namespace libai
