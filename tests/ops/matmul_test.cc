#include "ops/matmul.h"

#include <cmath>

#include "ops/cpu/onednn_gemm.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::expect_close;
using testing::gradcheck;
using testing::random;

// Reference: triple loops in f64 over broadcast batch indices (NumPy rules, written out).
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const size_t ra = sa.size() - 2, rb = sb.size() - 2, r = std::max(ra, rb);
  Shape batch(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - ra ? 1 : sa[i - (r - ra)], db = i < r - rb ? 1 : sb[i - (r - rb)];
    batch[i] = std::max(da, db);
  }
  const int64_t m = sa[ra], k = sa[ra + 1], n = sb[rb + 1];
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {m, n});
  Tensor out = Tensor::zeros(out_shape, DType::f64);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double* o = out.data<double>();
  const int64_t nb = shape_numel(batch);
  for (int64_t t = 0; t < nb; ++t) {
    // Decompose t into batch indices, then map to each operand (size-1 dims read index 0).
    int64_t rest = t, ia = 0, ib = 0, mul_a = 1, mul_b = 1;
    for (size_t d = r; d-- > 0;) {
      int64_t idx = rest % batch[d];
      rest /= batch[d];
      if (d >= r - ra) {
        int64_t size = sa[d - (r - ra)];
        ia += (size == 1 ? 0 : idx) * mul_a;
        mul_a *= size;
      }
      if (d >= r - rb) {
        int64_t size = sb[d - (r - rb)];
        ib += (size == 1 ? 0 : idx) * mul_b;
        mul_b *= size;
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[(ia * m + i) * k + p] * bv[(ib * k + p) * n + j];
        o[(t * m + i) * n + j] = s;
      }
  }
  return out;
}

Tensor transposed(const Tensor& t) {  // a [.., r, c] view of a contiguous [.., c, r]
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return t.as_strided(shape, strides, t.offset());
}

TEST(Matmul, ForwardMatchesLoops) {
  Tensor a = random({5, 7}, 1), b = random({7, 3}, 2);
  expect_close(ops::matmul(a, b), reference_matmul(a, b), 1e-14, "2-d");
  Tensor c = random({2, 1, 4, 3}, 3), d = random({3, 3, 5}, 4);
  expect_close(ops::matmul(c, d), reference_matmul(c, d), 1e-14, "broadcast batch");
  Tensor e = random({3, 4, 6}, 5), f = random({6, 2}, 6);
  expect_close(ops::matmul(e, f), reference_matmul(e, f), 1e-14, "batched x 2-d");
  expect_close(ops::matmul(f.as_strided({1, 6}, {0, 2}, 0), random({2, 6, 3}, 7)),
               reference_matmul(f.as_strided({1, 6}, {0, 2}, 0), random({2, 6, 3}, 7)), 1e-14,
               "row vector view");
}

TEST(Matmul, StridedLayouts) {
  // Transposed views go to BLAS as CblasTrans; a column-strided view must be gathered.
  Tensor at = random({7, 5}, 8), bt = random({3, 7}, 9);
  Tensor a = transposed(at), b = transposed(bt);
  expect_close(ops::matmul(a, b), reference_matmul(a.clone_raw(), b.clone_raw()), 1e-14, "trans");
  Tensor wide = random({5, 14}, 10);
  Tensor every_other = wide.as_strided({5, 7}, {14, 2}, 1);  // neither (ld, 1) nor (1, ld)
  expect_close(ops::matmul(every_other, random({7, 3}, 2)),
               reference_matmul(every_other.clone_raw(), random({7, 3}, 2)), 1e-14, "gathered");
  Tensor batch_t = transposed(random({2, 4, 6}, 11));  // [2, 6, 4]
  Tensor rhs = random({2, 4, 3}, 12);
  expect_close(ops::bmm(batch_t, rhs), reference_matmul(batch_t.clone_raw(), rhs), 1e-14, "bmm");
}

// One-row products (a decoding step) take OpenBLAS's gemv path: every layout of a and b,
// f32, against the f64 loops; and a batched one-row product whose batch is summed (beta = 1).
TEST(Matmul, OneRowF32AllLayouts) {
  auto f32 = [](const Tensor& t) {
    Tensor out = Tensor::empty(t.shape(), DType::f32);
    out.copy_from(t);
    return out;
  };
  const Tensor a = f32(random({1, 37}, 20)), at = f32(random({37, 1}, 21));
  const Tensor b = f32(random({37, 29}, 22)), bt = f32(random({29, 37}, 23));
  for (const Tensor& lhs : {a, transposed(at)})
    for (const Tensor& rhs : {b, transposed(bt)})
      expect_close(ops::matmul(lhs, rhs), reference_matmul(lhs.clone_raw(), rhs.clone_raw()), 1e-5,
                   "one row");
  const Tensor rows = f32(random({3, 1, 37}, 24)), batch = f32(random({3, 37, 29}, 25));
  Tensor summed = ops::gemm_raw(rows, batch, {1, 1, 29});
  Tensor expected = ops::sum(reference_matmul(rows, batch), {0}, true);
  expect_close(summed, expected, 1e-5, "one row, batch summed");
}

// A few rows (a batched decoding step) take the kernels of Note [Few-row GEMM]: 2 to 16 rows
// and the first row count past them, both weight layouts, inner sizes off and on 16, odd
// column counts, against the f64 loops; and a batch summed into one output (beta = 1), with
// a bias.
TEST(Matmul, FewRowsF32AllLayouts) {
  auto f32 = [](const Tensor& t) {
    Tensor out = Tensor::empty(t.shape(), DType::f32);
    out.copy_from(t);
    return out;
  };
  for (int64_t m : {2, 3, 4, 5, 8, 13, 16, 17})
    for (int64_t k : {7, 16, 37, 96})
      for (int64_t n : {1, 29, 130}) {
        const Tensor a = f32(random({m, k}, uint64_t(30 + m)));
        const Tensor b = f32(random({k, n}, uint64_t(40 + k))), bt = f32(random({n, k}, uint64_t(50 + n)));
        const std::string what = "m " + std::to_string(m) + " k " + std::to_string(k) + " n " +
                                 std::to_string(n);
        expect_close(ops::matmul(a, b), reference_matmul(a, b), 1e-5, (what + " [k, n]").c_str());
        expect_close(ops::matmul(a, transposed(bt)), reference_matmul(a, transposed(bt).clone_raw()),
                     1e-5, (what + " [n, k] (a weight)").c_str());
      }
  const Tensor rows = f32(random({3, 6, 37}, 26)), batch = f32(random({3, 37, 29}, 27));
  Tensor summed = ops::gemm_raw(rows, batch, {1, 6, 29});
  expect_close(summed, ops::sum(reference_matmul(rows, batch), {0}, true), 1e-5, "few rows, summed");
  const Tensor x = f32(random({5, 37}, 28)), w = f32(random({29, 37}, 29)), bias = f32(random({29}, 31));
  Tensor expected = reference_matmul(x, transposed(w).clone_raw());
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 29; ++j)
      expected.data<double>()[i * 29 + j] += double(bias.data<float>()[j]);
  expect_close(ops::linear(x, w, bias), expected, 1e-5, "few rows, linear with bias");
}

TEST(Matmul, EmptyInnerDimensionGivesZeros) {
  Tensor out = ops::matmul(Tensor::zeros({3, 0}, DType::f64), Tensor::zeros({0, 2}, DType::f64));
  expect_close(out, Tensor::zeros({3, 2}, DType::f64), 0.0, "k = 0");
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  // The backward passes multiply transposed views, so these also cover the CblasTrans path.
  auto mm = [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); };
  gradcheck(mm,
            {random({4, 3}, 1).set_requires_grad(true), random({3, 5}, 2).set_requires_grad(true)});
  gradcheck(mm, {random({2, 1, 4, 3}, 3).set_requires_grad(true),
                 random({3, 3, 2}, 4).set_requires_grad(true)});
  gradcheck(mm, {random({2, 3, 4}, 5).set_requires_grad(true),
                 random({4, 2}, 6).set_requires_grad(true)});
  gradcheck(mm, {random({3, 4}, 7).set_requires_grad(true),
                 random({2, 4, 3}, 8).set_requires_grad(true)});
}

TEST(Matmul, LowPrecisionWithinTolerance) {
  Tensor a = random({2, 33, 40}, 11), b = random({40, 17}, 12);
  Tensor ref = reference_matmul(a, b);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor out = ops::matmul(to_dtype(a, dt), to_dtype(b, dt));
    EXPECT_EQ(out.dtype(), dt);
    // Inputs are rounded to dt: the error grows like sqrt(k) * eps * |a||b|.
    double tol = dt == DType::f32 ? 1e-6 : dt == DType::bf16 ? 3e-2 : 4e-3;
    expect_close(out, ref, tol, dtype_name(dt));
    Tensor out_t =
        ops::matmul(to_dtype(a, dt), transposed(to_dtype(transposed(b).clone_raw(), dt)));
    expect_close(out_t, ref, tol, "transposed 16-bit operand");
    // A broadcast left operand: converted once, reused for every batch.
    Tensor c = random({33, 40}, 16), d = random({3, 40, 17}, 17);
    expect_close(ops::matmul(to_dtype(c, dt), to_dtype(d, dt)), reference_matmul(c, d), tol,
                 "broadcast 16-bit operand");
  }
}

TEST(Matmul, LowPrecisionGradientsSumInF32) {
  // dB sums over a batch of 64: accumulating in bf16 would lose about 2 digits.
  Tensor a = random({64, 8, 16}, 13), b = random({16, 4}, 14);
  Tensor a16 = to_dtype(a, DType::bf16), b16 = to_dtype(b, DType::bf16).set_requires_grad(true);
  Tensor g = random({64, 8, 4}, 15);
  auto grads = autograd::grad(ops::matmul(a16, b16), {b16}, to_dtype(g, DType::bf16));
  auto av = a16.to_vector<double>(), gv = to_dtype(g, DType::bf16).to_vector<double>();
  Tensor expect = Tensor::zeros({16, 4}, DType::f64);
  for (int t = 0; t < 64; ++t)
    for (int i = 0; i < 8; ++i)
      for (int p = 0; p < 16; ++p)
        for (int j = 0; j < 4; ++j)
          expect.data<double>()[p * 4 + j] += av[(t * 8 + i) * 16 + p] * gv[(t * 8 + i) * 4 + j];
  expect_close(grads[0], expect, 8e-3, "bf16 dB");
}

// bf16 products on both CPU paths (oneDNN on native bf16 units where available, and the
// f32-conversion path) against f64 loops over the same bf16 inputs: the f32 sum rounds once
// to bf16, so each element is within half a bf16 ulp (2^-8 relative) of the exact product,
// plus the f32 accumulation error (k * 2^-24 * sum |a||b|).
TEST(Matmul, Bf16RoundsOnceOnEveryPath) {
  auto check = [](const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                  const std::string& what) {
    // a [m, k] and b [k, n] are bf16 (any strides); bias bf16 [n] or undefined.
    const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
    auto av = a.to_vector<double>(), bv = b.to_vector<double>(), ov = out.to_vector<double>();
    std::vector<double> biasv = bias.defined() ? bias.to_vector<double>() : std::vector<double>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double exact = biasv.empty() ? 0 : biasv[size_t(j)], magnitude = std::abs(exact);
        for (int64_t p = 0; p < k; ++p) {
          exact += av[size_t(i * k + p)] * bv[size_t(p * n + j)];
          magnitude += std::abs(av[size_t(i * k + p)] * bv[size_t(p * n + j)]);
        }
        const double tol = std::ldexp(std::abs(exact), -8) * 1.001 + double(k) * 6e-8 * magnitude;
        ASSERT_LE(std::abs(ov[size_t(i * n + j)] - exact), tol)
            << what << " at (" << i << ", " << j << ")";
      }
  };
  Tensor a = to_dtype(random({70, 96}, 21), DType::bf16);
  Tensor b = to_dtype(random({96, 50}, 22), DType::bf16);
  Tensor bt = transposed(to_dtype(transposed(b).clone_raw(), DType::bf16));  // b, column-major
  Tensor bias = to_dtype(random({50}, 23), DType::bf16);
  // Every other column of a wider matrix: neither stride is 1, so it is gathered first.
  Tensor wide = to_dtype(random({70, 192}, 24), DType::bf16);
  Tensor a_gapped = wide.as_strided({70, 96}, {192, 2}, 0);
  Tensor a3 = to_dtype(random({3, 70, 32}, 25), DType::bf16);
  Tensor b3 = to_dtype(random({3, 32, 50}, 26), DType::bf16);
  for (bool onednn : {true, false}) {
    ops::cpu::set_onednn_bf16_enabled(onednn);
    const std::string path = onednn ? "oneDNN (where available): " : "f32 conversion: ";
    check(ops::matmul(a, b), a, b, Tensor(), path + "row-major");
    check(ops::matmul(transposed(transposed(a).clone_raw()), bt), a, b, Tensor(),
          path + "transposed views");
    check(ops::matmul(a_gapped, b), a_gapped, b, Tensor(), path + "gathered operand");
    check(ops::linear(a, transposed(b).clone_raw(), bias), a, b, bias, path + "linear + bias");
    // Summed over a batch of 3 = one product with k = 3 x 32 (the weight gradient's shape).
    Tensor summed = ops::gemm_raw(a3, b3, {70, 50});
    Tensor a_cat = ops::contiguous(ops::permute(a3, {1, 0, 2})).as_strided({70, 96}, {96, 1}, 0);
    Tensor b_cat = b3.as_strided({96, 50}, {50, 1}, 0);
    check(summed, a_cat, b_cat, Tensor(), path + "summed over a batch");
  }
  ops::cpu::set_onednn_bf16_enabled(true);
}

TEST(Matmul, ErrorsNameShapes) {
  try {
    ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("[2, 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("[4, 5]"), std::string::npos) << what;
  }
  EXPECT_THROW(ops::matmul(Tensor::zeros({3}), Tensor::zeros({3, 2})), InvalidArgument);
  EXPECT_THROW(ops::matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 2})), InvalidArgument);
  EXPECT_THROW(ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}, DType::f64)),
               InvalidArgument);
  EXPECT_THROW(ops::bmm(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 2})), InvalidArgument);
  EXPECT_THROW(ops::matmul(Tensor::zeros({2, 3}, DType::i64), Tensor::zeros({3, 2}, DType::i64)),
               InvalidArgument);
}

// Reference for linear: x [rows, in] · weightᵀ + bias, in loops.
Tensor reference_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t in = w.shape()[1], out_f = w.shape()[0], rows = x.numel() / in;
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv =
      bias.defined() ? bias.to_vector<double>() : std::vector<double>(size_t(out_f), 0.0);
  Shape shape = x.shape();
  shape.back() = out_f;
  Tensor out = Tensor::empty(shape, DType::f64);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out_f; ++o) {
      double s = bv[size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += xv[r * in + i] * wv[o * in + i];
      out.data<double>()[r * out_f + o] = s;
    }
  return out;
}

TEST(Linear, ForwardMatchesLoops) {
  Tensor x = random({2, 3, 6}, 1), w = random({4, 6}, 2), bias = random({4}, 3);
  expect_close(ops::linear(x, w, bias), reference_linear(x, w, bias), 1e-14, "with bias");
  expect_close(ops::linear(x, w), reference_linear(x, w, Tensor()), 1e-14, "no bias");
  Tensor v = random({6}, 4);
  expect_close(ops::linear(v, w, bias), reference_linear(v, w, bias), 1e-14, "vector x");
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor out = ops::linear(to_dtype(x, dt), to_dtype(w, dt), to_dtype(bias, dt));
    expect_close(out, reference_linear(x, w, bias), dt == DType::f32 ? 1e-6 : 2e-2, dtype_name(dt));
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  auto lin = [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); };
  gradcheck(
      lin, {random({2, 3, 5}, 1).set_requires_grad(true), random({4, 5}, 2).set_requires_grad(true),
            random({4}, 3).set_requires_grad(true)});
  gradcheck(lin, {random({5}, 4).set_requires_grad(true), random({3, 5}, 5).set_requires_grad(true),
                  random({3}, 6).set_requires_grad(true)});
  gradcheck([](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1]); },
            {random({7, 5}, 7).set_requires_grad(true), random({2, 5}, 8).set_requires_grad(true)});
}

TEST(Linear, ErrorsNameShapes) {
  try {
    ops::linear(Tensor::zeros({2, 5}), Tensor::zeros({4, 6}));
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("[2, 5]"), std::string::npos) << what;
    EXPECT_NE(what.find("[4, 6]"), std::string::npos) << what;
  }
  EXPECT_THROW(ops::linear(Tensor::zeros({2, 6}), Tensor::zeros({4, 6}), Tensor::zeros({5})),
               InvalidArgument);
}

}  // namespace
}  // namespace libai
