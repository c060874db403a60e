// Test helpers for ops: deterministic random inputs, comparison with tolerances, and the
// f64 finite-difference gradient check every op's backward must pass.
//
//   Tensor x = testing::random({3, 4}, /*seed=*/1).set_requires_grad(true);
//   testing::expect_close(ops::gelu(x), reference, 1e-12);
//   testing::gradcheck([](const std::vector<Tensor>& in) { return ops::gelu(in[0]); }, {x});
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "runtime/autograd.h"
#include "runtime/device_copy.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace libai::testing {

// Uniform values in [low, high), seeded; f64 unless told otherwise.
inline Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::f64, double low = -1.0,
                     double high = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  init_uniform(t, RngKey{seed, 7}, low, high);
  return t;
}

// max |a - b| / max(1, max |b|) <= tol, elementwise on converted f64 values.
inline void expect_close(const Tensor& actual, const Tensor& expected, double tol,
                         const char* what = "") {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  auto a = to_device(actual, Device::cpu()).to_vector<double>();
  auto e = to_device(expected, Device::cpu()).to_vector<double>();
  double scale = 1.0, worst = 0.0;
  size_t worst_i = 0;
  for (double v : e) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    double err = std::abs(a[i] - e[i]);
    if (!(err <= worst)) {  // catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst / scale, tol) << what << ": worst element " << worst_i << " got "
                                << (a.empty() ? 0 : a[worst_i]) << " expected "
                                << (e.empty() ? 0 : e[worst_i]);
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Compares autograd's gradients of sum(f(inputs) * w) (w a fixed random weight) with
// central finite differences in f64. Inputs must be f64 leaves; those with requires_grad
// are checked. Relative error is measured against max(1, |numeric|).
inline void gradcheck(const OpFn& f, std::vector<Tensor> inputs, double tol = 1e-6,
                      double eps = 1e-6) {
  for (auto& t : inputs) ASSERT_EQ(t.dtype(), DType::f64) << "gradcheck needs f64 inputs";
  Tensor out = f(inputs);
  ASSERT_TRUE(out.defined());
  Tensor weight = random(out.shape(), 991, DType::f64);
  auto weighted = [&](const std::vector<Tensor>& in) {
    autograd::NoGradGuard guard;
    Tensor o = f(in);
    auto ov = o.to_vector<double>();
    auto wv = weight.to_vector<double>();
    double s = 0;
    for (size_t i = 0; i < ov.size(); ++i) s += ov[i] * wv[i];
    return s;
  };
  std::vector<Tensor> wanted;
  for (auto& t : inputs)
    if (t.requires_grad()) wanted.push_back(t);
  std::vector<Tensor> analytic = autograd::grad(out, wanted, weight);
  size_t k = 0;
  for (auto& t : inputs) {
    if (!t.requires_grad()) continue;
    Tensor g = analytic[k++];
    ASSERT_TRUE(t.is_contiguous());
    std::vector<double> numeric(size_t(t.numel()));
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      double saved = p[i];
      p[i] = saved + eps;
      double up = weighted(inputs);
      p[i] = saved - eps;
      double down = weighted(inputs);
      p[i] = saved;
      numeric[size_t(i)] = (up - down) / (2 * eps);
    }
    std::vector<double> got =
        g.defined() ? g.to_vector<double>() : std::vector<double>(numeric.size(), 0.0);
    ASSERT_EQ(got.size(), numeric.size());
    for (size_t i = 0; i < got.size(); ++i) {
      double err = std::abs(got[i] - numeric[i]) / std::max(1.0, std::abs(numeric[i]));
      ASSERT_LE(err, tol) << "input " << (k - 1) << " element " << i << ": autograd " << got[i]
                          << " vs finite difference " << numeric[i];
    }
  }
}

}  // namespace libai::testing
