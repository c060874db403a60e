// The f64 reference of the packed and quantized linear products' tests.
#pragma once

#include <cmath>
#include <optional>
#include <vector>

#include "ops/activation.h"
#include "ops/cpu/packed_gemm.h"
#include "runtime/tensor.h"

namespace libai::testing {

// act(x wᵀ + bias) + residual in f64, from the f32 operands' values.
inline Tensor reference(const Tensor& x, const Tensor& w, const Tensor& bias,
                 std::optional<ops::UnaryOp> act, const Tensor& residual) {
  const int64_t k = x.size(-1), n = w.size(0);
  int64_t m = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  auto xv = x.clone_raw().to_vector<double>(), wv = w.clone_raw().to_vector<double>();
  std::vector<double> bv = bias.defined() ? bias.to_vector<double>() : std::vector<double>();
  std::vector<double> rv =
      residual.defined() ? residual.clone_raw().to_vector<double>() : std::vector<double>();
  Shape shape = x.shape();
  shape.back() = n;
  Tensor out = Tensor::empty(shape, DType::f64);
  double* o = out.data<double>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bv.empty() ? 0.0 : bv[size_t(j)];
      for (int64_t p = 0; p < k; ++p) s += xv[size_t(i * k + p)] * wv[size_t(j * k + p)];
      if (act == ops::UnaryOp::relu) s = s < 0 ? 0 : s;
      if (act == ops::UnaryOp::gelu_erf) s = 0.5 * s * std::erfc(-s / std::sqrt(2.0));
      if (act == ops::UnaryOp::gelu_tanh)
        s = 0.5 * s * (1 + std::tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
      if (act == ops::UnaryOp::silu) s = s / (1 + std::exp(-s));
      if (!rv.empty()) s += rv[size_t(i * n + j)];
      o[i * n + j] = s;
    }
  return out;
}

using ops::cpu::PackedKernel;

// The packed kernels this CPU can run.
inline std::vector<PackedKernel> kernels() {
  std::vector<PackedKernel> out;
  for (PackedKernel k : {PackedKernel::avx512, PackedKernel::avx2, PackedKernel::portable})
    if (ops::cpu::packed_kernel_supported(k)) out.push_back(k);
  return out;
}

struct KernelScope {
  explicit KernelScope(PackedKernel k) { ops::cpu::force_packed_kernel(k); }
  ~KernelScope() { ops::cpu::force_packed_kernel(PackedKernel::automatic); }
};

inline const char* name(PackedKernel k) {
  return k == PackedKernel::avx512      ? "avx512"
         : k == PackedKernel::avx2      ? "avx2"
         : k == PackedKernel::automatic ? "automatic"
                                        : "portable";
}

}  // namespace libai::testing
