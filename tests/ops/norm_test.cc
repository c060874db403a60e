#include "ops/norm.h"

#include <cmath>

#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::gradcheck;
using testing::random;

// Plain loops in f64; weight/bias may be undefined.
Tensor reference(const Tensor& x, const Tensor& w, const Tensor& b, double eps, bool rms) {
  const int64_t h = x.shape().back(), rows = x.numel() / h;
  auto v = x.to_vector<double>();
  std::vector<double> wv = w.defined() ? w.to_vector<double>() : std::vector<double>(h, 1.0);
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(h, 0.0);
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < h; ++j) mean += v[r * h + j] / h;
    if (rms) mean = 0;
    for (int64_t j = 0; j < h; ++j) var += (v[r * h + j] - mean) * (v[r * h + j] - mean) / h;
    for (int64_t j = 0; j < h; ++j)
      out[r * h + j] = (v[r * h + j] - mean) / std::sqrt(var + eps) * wv[j] + bv[j];
  }
  return Tensor::from_vector<double>(out, x.shape());
}

TEST(Norm, ForwardMatchesLoops) {
  Tensor x = random({3, 4, 37}, 31, DType::f64, -2, 3);
  Tensor w = random({37}, 32, DType::f64), b = random({37}, 33, DType::f64);
  testing::expect_close(ops::layer_norm(x, w, b, 1e-5), reference(x, w, b, 1e-5, false), 1e-13,
                        "layer_norm");
  testing::expect_close(ops::layer_norm(x, Tensor(), Tensor(), 1e-5),
                        reference(x, Tensor(), Tensor(), 1e-5, false), 1e-13, "no affine");
  testing::expect_close(ops::rms_norm(x, w, 1e-6), reference(x, w, Tensor(), 1e-6, true), 1e-13,
                        "rms_norm");
  // A large common offset: the centred variance must not cancel.
  Tensor shifted = random({4, 64}, 34, DType::f64, 1000, 1001);
  testing::expect_close(ops::layer_norm(to_dtype(shifted, DType::f32), Tensor(), Tensor(), 1e-5),
                        reference(to_dtype(to_dtype(shifted, DType::f32), DType::f64), Tensor(),
                                  Tensor(), 1e-5, false),
                        2e-3, "offset f32");
}

TEST(Norm, BackwardMatchesFiniteDifferences) {
  Tensor x = random({5, 7}, 35, DType::f64, -2, 2).set_requires_grad(true);
  Tensor w = random({7}, 36, DType::f64).set_requires_grad(true);
  Tensor b = random({7}, 37, DType::f64).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], in[2]); },
            {x, w, b});
  gradcheck(
      [](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], Tensor(), Tensor()); },
      {x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], in[1]); }, {x, w});
  gradcheck([](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], Tensor()); }, {x});
  // Many rows: the fixed-block reduction of the weight gradient.
  Tensor xl = random({150, 3}, 38, DType::f64).set_requires_grad(true);
  Tensor wl = random({3}, 39, DType::f64).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], Tensor()); },
            {xl, wl});
}

TEST(Norm, LowPrecisionWithinTolerance) {
  Tensor x = random({33, 768}, 40, DType::f64, -3, 3);
  Tensor w = random({768}, 41, DType::f64), b = random({768}, 42, DType::f64);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor xl = to_dtype(x, dt), wl = to_dtype(w, dt), bl = to_dtype(b, dt);
    auto r = [](const Tensor& t) { return to_dtype(t, DType::f64); };
    double tol = dt == DType::f32 ? 2e-6 : dt == DType::bf16 ? 2e-2 : 4e-3;
    Tensor y = ops::layer_norm(xl, wl, bl);
    EXPECT_EQ(y.dtype(), dt);
    testing::expect_close(y, reference(r(xl), r(wl), r(bl), 1e-5, false), tol, dtype_name(dt));
    testing::expect_close(ops::rms_norm(xl, wl), reference(r(xl), r(wl), Tensor(), 1e-6, true), tol,
                          dtype_name(dt));
    // Backward against the f64 backward on the same rounded inputs.
    Tensor g = random(x.shape(), 43, DType::f64);
    Tensor a = r(xl).set_requires_grad(true), aw = r(wl).set_requires_grad(true);
    auto ref = autograd::grad(ops::layer_norm(a, aw, Tensor()), {a, aw}, g);
    Tensor c = xl.clone_raw().set_requires_grad(true), cw = wl.clone_raw().set_requires_grad(true);
    auto got = autograd::grad(ops::layer_norm(c, cw, Tensor()), {c, cw}, to_dtype(g, dt));
    testing::expect_close(got[0], ref[0], tol * 2, "grad x");
    testing::expect_close(got[1], ref[1], tol * 2, "grad weight");
  }
}

TEST(Norm, BadParametersNameShapes) {
  Tensor x = Tensor::zeros({2, 8});
  try {
    ops::layer_norm(x, Tensor::ones({7}), Tensor());
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("layer_norm: weight of shape [7]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 8]"), std::string::npos) << msg;
  }
  EXPECT_THROW(ops::rms_norm(x, Tensor::ones({8}, DType::f64)), InvalidArgument);
  EXPECT_THROW(ops::layer_norm(Tensor::zeros({2, 8}, DType::i32), Tensor(), Tensor()),
               InvalidArgument);
}

}  // namespace
}  // namespace libai
