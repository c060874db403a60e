// Eager training of a small MLP on this CPU with LiBai-Actor's kernels and autograd: the
// target is a fixed random "teacher" MLP, so the loss a person sees falling is a real fit.
// Before training, one gradient is checked against f64 central finite differences.
//
//   build/examples/eager_mlp [steps]
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "runtime/autograd.h"
#include "runtime/device_copy.h"
#include "runtime/progress.h"
#include "runtime/rng.h"

using namespace libai;

namespace {

struct Mlp {
  Tensor w1, b1, w2, b2;  // [hidden, in], [hidden], [out, hidden], [out]

  static Mlp random(uint64_t seed, int64_t in, int64_t hidden, int64_t out, DType dtype) {
    auto param = [&](const char* name, Shape shape, double std) {
      Tensor t = Tensor::empty(shape, dtype);
      init_normal(t, RngKey{seed, stream_id(name)}, 0.0, std);
      return t.set_requires_grad(true);
    };
    return {param("w1", {hidden, in}, 1.0 / std::sqrt(double(in))), param("b1", {hidden}, 0.1),
            param("w2", {out, hidden}, 1.0 / std::sqrt(double(hidden))), param("b2", {out}, 0.1)};
  }
  Tensor forward(const Tensor& x) const {
    Tensor h = ops::gelu(ops::linear(x, w1, b1));  // [batch, hidden]
    return ops::linear(h, w2, b2);                 // [batch, out]
  }
  std::vector<Tensor> parameters() const { return {w1, b1, w2, b2}; }
};

Tensor mse(const Tensor& prediction, const Tensor& target) {
  Tensor d = ops::sub(prediction, target);
  return ops::mean_all(ops::mul(d, d));
}

// Largest relative difference between autograd's dLoss/dw1 and central differences (f64).
double gradient_check() {
  Mlp m = Mlp::random(7, 5, 6, 3, DType::f64);
  Tensor x = Tensor::empty({4, 5}, DType::f64), y = Tensor::empty({4, 3}, DType::f64);
  init_normal(x, {1, 1}, 0, 1);
  init_normal(y, {1, 2}, 0, 1);
  Tensor g = autograd::grad(mse(m.forward(x), y), {m.w1})[0];
  double worst = 0;
  double* w = m.w1.data<double>();
  auto gv = g.to_vector<double>();
  for (int64_t i = 0; i < m.w1.numel(); ++i) {
    autograd::NoGradGuard no_grad;
    const double eps = 1e-6, saved = w[i];
    w[i] = saved + eps;
    double up = mse(m.forward(x), y).item<double>();
    w[i] = saved - eps;
    double down = mse(m.forward(x), y).item<double>();
    w[i] = saved;
    double numeric = (up - down) / (2 * eps);
    worst = std::max(worst, std::abs(numeric - gv[size_t(i)]) / std::max(1.0, std::abs(numeric)));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 1000;
    std::printf("gradient check (f64, autograd vs central differences): max relative error %.2e\n",
                gradient_check());

    const int64_t batch = 256, in = 32, hidden = 128, out = 8;
    Mlp teacher = Mlp::random(1, in, hidden, out, DType::f32);
    Mlp student = Mlp::random(2, in, hidden, out, DType::f32);
    const double lr = 0.05;
    double first = 0, last = 0;
    Progress progress("train", steps, "step", 0.5, stdout);
    for (int step = 0; step < steps; ++step) {
      Tensor x = Tensor::empty({batch, in});
      init_normal(x, derive(RngKey{3, stream_id("data")}, uint64_t(step)), 0, 1);
      Tensor target;
      {
        autograd::NoGradGuard no_grad;
        target = teacher.forward(x);
      }
      Tensor loss = mse(student.forward(x), target);
      autograd::backward(loss);
      {
        autograd::NoGradGuard no_grad;  // plain SGD
        for (Tensor p : student.parameters()) {
          p.copy_from(ops::sub(p, ops::scale(p.grad(), lr)));
          p.zero_grad();
        }
      }
      last = loss.item<double>();
      if (step == 0) first = last;
      char detail[64];
      std::snprintf(detail, sizeof detail, "loss %.5f", last);
      progress.advance(1, detail);
    }
    std::printf("loss %.5f -> %.5f (%.1fx lower) in %d steps, %.0f samples/s\n", first, last,
                first / last, steps, double(steps * batch) / progress.elapsed_seconds());
    return last < first ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "eager_mlp: error: %s\n", e.what());
    return 1;
  }
}
