// runtime/blas.h: OpenBLAS split over our pool gives the product a plain f64 triple loop gives,
// for every way a product is split (by columns when n >= m, by rows otherwise, or not at all
// when small), every transpose, a bias, a C wider than the product (ldc > n), and thread
// budgets of one and two; and one-row products through gemv_row.
#include "runtime/blas.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/device.h"
#include "runtime/threads.h"

namespace libai {
namespace {

struct Case {
  int64_t m, n, k;
  bool ta, tb, bias;
};

// Deterministic values in [-1, 1).
std::vector<float> values(int64_t count, int seed) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    v[size_t(i)] = float((i * 7919 + seed * 104729) % 2001) / 1000.0f - 1.0f;
  return v;
}

void check(const Case& c, int threads) {
  ThreadBudgetScope budget({{Device::cpu(0), threads}});
  const int64_t lda = std::max<int64_t>(1, c.ta ? c.m : c.k);
  const int64_t ldb = c.tb ? std::max<int64_t>(1, c.k) : c.n, ldc = c.n + 3;
  const auto a = values(c.m * c.k, 1), b = values(c.k * c.n, 2), bias = values(c.n, 3);
  std::vector<float> out(size_t(c.m * ldc), 7.0f);  // C's old values: ignored (beta 0, or bias)
  gemm(c.ta ? Transpose::yes : Transpose::no, c.tb ? Transpose::yes : Transpose::no, c.m, c.n, c.k,
       1.0f, a.data(), lda, b.data(), ldb, 0.0f, out.data(), ldc, c.bias ? bias.data() : nullptr);
  double worst = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double want = c.bias ? bias[size_t(j)] : 0.0;
      for (int64_t l = 0; l < c.k; ++l)
        want += double(a[size_t(c.ta ? l * lda + i : i * lda + l)]) *
                double(b[size_t(c.tb ? j * ldb + l : l * ldb + j)]);
      worst = std::max(worst, std::abs(want - double(out[size_t(i * ldc + j)])));
    }
    for (int64_t j = c.n; j < ldc; ++j)
      ASSERT_EQ(out[size_t(i * ldc + j)], 7.0f) << "wrote past column n, row " << i;
  }
  EXPECT_LE(worst, 1e-4 * double(c.k))
      << c.m << "x" << c.n << "x" << c.k << " ta " << c.ta << " tb " << c.tb << " bias " << c.bias
      << ", " << threads << " threads";
}

TEST(Blas, SplitProductsEqualTheTripleLoop) {
  const std::vector<Case> cases = {
      {64, 300, 96, false, true, true},   // by columns (n >= m), weight [out, in] transposed
      {300, 64, 96, false, false, true},  // by rows (m > n)
      {200, 77, 130, true, true, false},  // by rows, both transposed, no bias
      {33, 513, 64, true, false, true},   // by columns, a transposed, n not a multiple of 16
      {8, 8, 8, false, false, true},      // too small to split
      {40, 40, 0, false, false, true},    // k = 0: the bias alone
  };
  for (const Case& c : cases)
    for (int threads : {1, 2}) check(c, threads);
}

TEST(Blas, OneRowProductsEqualTheTripleLoop) {
  for (const bool tb : {false, true}) {
    for (int threads : {1, 2}) {
      ThreadBudgetScope budget({{Device::cpu(0), threads}});
      const int64_t n = 1000, k = 300, ldb = tb ? k : n;
      const auto x = values(k, 4), b = values(n * k, 5);
      std::vector<float> out(size_t(n), 0.5f);
      gemv_row(tb ? Transpose::yes : Transpose::no, n, k, x.data(), 1, b.data(), ldb, 1.0f,
               out.data());
      for (int64_t j = 0; j < n; ++j) {
        double want = 0.5;
        for (int64_t l = 0; l < k; ++l)
          want += double(x[size_t(l)]) * double(b[size_t(tb ? j * ldb + l : l * ldb + j)]);
        ASSERT_NEAR(out[size_t(j)], want, 1e-3) << "column " << j << " tb " << tb;
      }
    }
  }
}

}  // namespace
}  // namespace libai
