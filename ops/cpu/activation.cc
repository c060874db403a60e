// CPU kernels of ops/activation.h. The f32 loops vectorise (ops/cpu/vector_math.h); the
// 16-bit formats go through small f32 blocks so the same vector loop runs on them.
#include <cmath>

#include "ops/activation.h"
#include "ops/cpu/vector_math.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per parallel chunk
constexpr int64_t kBlock = 256;      // f32 staging block for bf16 / f16

template <typename C>
C exp_c(C x) {
  if constexpr (std::is_same_v<C, float>)
    return exp_f32(x);
  else
    return std::exp(x);
}

template <typename C>
C sigmoid_c(C x) {
  return C(1) / (C(1) + exp_c(-x));
}

template <UnaryOp Op, typename C>
inline C forward_value(C x, C param) {
  if constexpr (Op == UnaryOp::relu)
    return x < C(0) ? C(0) : x;
  else if constexpr (Op == UnaryOp::gelu_erf) {
    if constexpr (std::is_same_v<C, float>)
      return x * normal_cdf_f32(x);
    else
      return C(0.5) * x * std::erfc(-x * C(M_SQRT1_2));
  } else if constexpr (Op == UnaryOp::gelu_tanh) {
    // 0.5 x (1 + tanh(u)) = x * sigmoid(2u), which does not cancel for negative u.
    const C u = C(kGeluTanhScale) * (x + C(kGeluTanhCubic) * x * x * x);
    return x * sigmoid_c(C(2) * u);
  } else if constexpr (Op == UnaryOp::silu)
    return x * sigmoid_c(x);
  else if constexpr (Op == UnaryOp::sigmoid)
    return sigmoid_c(x);
  else if constexpr (Op == UnaryOp::tanh)
    return std::tanh(x);
  else if constexpr (Op == UnaryOp::exp)
    return exp_c(x);
  else if constexpr (Op == UnaryOp::log)
    return std::log(x);
  else if constexpr (Op == UnaryOp::sqrt)
    return std::sqrt(x);
  else if constexpr (Op == UnaryOp::rsqrt)
    return C(1) / std::sqrt(x);
  else
    return std::pow(x, param);
}

// op'(v) where v is the input x, or the output y when unary_backward_uses_output(op).
template <UnaryOp Op, typename C>
inline C derivative(C v, C param) {
  if constexpr (Op == UnaryOp::relu)
    return v > C(0) ? C(1) : C(0);
  else if constexpr (Op == UnaryOp::gelu_erf) {
    if constexpr (std::is_same_v<C, float>) {
      float density;
      const float cdf = normal_cdf_and_density_f32(v, density);
      return cdf + v * density;
    } else {
      return C(0.5) * std::erfc(-v * C(M_SQRT1_2)) +
             v * std::exp(C(-0.5) * v * v) * C(M_2_SQRTPI * M_SQRT1_2 * 0.5);
    }
  } else if constexpr (Op == UnaryOp::gelu_tanh) {
    const C u = C(kGeluTanhScale) * (v + C(kGeluTanhCubic) * v * v * v);
    const C du = C(kGeluTanhScale) * (C(1) + C(3 * kGeluTanhCubic) * v * v);
    const C s = sigmoid_c(C(2) * u);
    return s + v * C(2) * s * (C(1) - s) * du;
  } else if constexpr (Op == UnaryOp::silu) {
    const C s = sigmoid_c(v);
    return s * (C(1) + v * (C(1) - s));
  } else if constexpr (Op == UnaryOp::sigmoid)
    return v * (C(1) - v);
  else if constexpr (Op == UnaryOp::tanh)
    return C(1) - v * v;
  else if constexpr (Op == UnaryOp::exp)
    return v;
  else if constexpr (Op == UnaryOp::log)
    return C(1) / v;
  else if constexpr (Op == UnaryOp::sqrt)
    return C(0.5) / v;
  else if constexpr (Op == UnaryOp::rsqrt)
    return C(-0.5) * v * v * v;
  else
    return param * std::pow(v, param - C(1));
}

// out[i] = fn(a[i]) or fn(a[i], b[i]) in parallel chunks; contiguous arrays of length n.
template <typename T, int Inputs, typename Fn>
void map(const T* a, const T* b, T* out, int64_t n, Fn fn) {
  parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (!is_half_v<T>) {
      for (int64_t i = begin; i < end; ++i) {
        if constexpr (Inputs == 1)
          out[i] = fn(a[i]);
        else
          out[i] = fn(a[i], b[i]);
      }
    } else {
      float va[kBlock], vb[kBlock];
      for (int64_t start = begin; start < end; start += kBlock) {
        const int64_t len = std::min(kBlock, end - start);
        for (int64_t i = 0; i < len; ++i) va[i] = float(a[start + i]);
        if constexpr (Inputs == 2)
          for (int64_t i = 0; i < len; ++i) vb[i] = float(b[start + i]);
        for (int64_t i = 0; i < len; ++i) {
          if constexpr (Inputs == 1)
            va[i] = fn(va[i]);
          else
            va[i] = fn(va[i], vb[i]);
        }
        for (int64_t i = 0; i < len; ++i) out[start + i] = T(va[i]);
      }
    }
  });
}

// The ops whose f32 forward runs 16 lanes at a time (vector_math's generic functions): the
// same formulas as forward_value's, with the values kept in vector registers.
template <UnaryOp Op>
constexpr bool kLaneOp = Op == UnaryOp::gelu_erf || Op == UnaryOp::gelu_tanh ||
                         Op == UnaryOp::silu || Op == UnaryOp::sigmoid || Op == UnaryOp::exp;

template <UnaryOp Op>
void forward_lanes(const float* x, float* out, int64_t n) {
  parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    map_lanes(x + begin, out + begin, end - begin, [](auto v) {
      if constexpr (Op == UnaryOp::gelu_erf)
        return gelu_erf_v(v);
      else if constexpr (Op == UnaryOp::gelu_tanh)
        return gelu_tanh_v(v);
      else if constexpr (Op == UnaryOp::silu)
        return silu_v(v);
      else if constexpr (Op == UnaryOp::sigmoid)
        return sigmoid_v(v);
      else
        return exp_v(v);
    });
  });
}

template <UnaryOp Op>
void forward_op(double param, const Tensor& x, Tensor& out) {
  if constexpr (kLaneOp<Op>) {
    if (x.dtype() == DType::f32) return forward_lanes<Op>(x.data<float>(), out.data<float>(), x.numel());
  }
  dispatch_floating(x.dtype(), "unary", [&]<typename T>() {
    using C = compute_t<T>;
    const C p = C(param);
    map<T, 1>(x.data<T>(), nullptr, out.data<T>(), x.numel(),
              [p](C v) { return forward_value<Op, C>(v, p); });
  });
}

template <UnaryOp Op>
void backward_op(double param, const Tensor& v, const Tensor& grad, Tensor& grad_in) {
  dispatch_floating(grad.dtype(), "unary backward", [&]<typename T>() {
    using C = compute_t<T>;
    const C p = C(param);
    map<T, 2>(v.data<T>(), grad.data<T>(), grad_in.data<T>(), grad.numel(),
              [p](C value, C g) { return g * derivative<Op, C>(value, p); });
  });
}

// Calls body.template operator()<Op>() for the runtime op.
template <typename Body>
void with_op(UnaryOp op, Body&& body) {
  switch (op) {
    case UnaryOp::relu: return body.template operator()<UnaryOp::relu>();
    case UnaryOp::gelu_erf: return body.template operator()<UnaryOp::gelu_erf>();
    case UnaryOp::gelu_tanh: return body.template operator()<UnaryOp::gelu_tanh>();
    case UnaryOp::silu: return body.template operator()<UnaryOp::silu>();
    case UnaryOp::sigmoid: return body.template operator()<UnaryOp::sigmoid>();
    case UnaryOp::tanh: return body.template operator()<UnaryOp::tanh>();
    case UnaryOp::exp: return body.template operator()<UnaryOp::exp>();
    case UnaryOp::log: return body.template operator()<UnaryOp::log>();
    case UnaryOp::sqrt: return body.template operator()<UnaryOp::sqrt>();
    case UnaryOp::rsqrt: return body.template operator()<UnaryOp::rsqrt>();
    case UnaryOp::pow: return body.template operator()<UnaryOp::pow>();
  }
}

void unary_cpu(UnaryOp op, double param, const Tensor& x, Tensor& out) {
  with_op(op, [&]<UnaryOp Op>() { forward_op<Op>(param, x, out); });
}

void unary_backward_cpu(UnaryOp op, double param, const Tensor& x, const Tensor& y,
                        const Tensor& grad, Tensor& grad_in) {
  const Tensor& v = unary_backward_uses_output(op) ? y : x;
  with_op(op, [&]<UnaryOp Op>() { backward_op<Op>(param, v, grad, grad_in); });
}

}  // namespace

LIBAI_REGISTER_KERNEL(unary, DeviceType::cpu, unary_cpu);
LIBAI_REGISTER_KERNEL(unary_backward, DeviceType::cpu, unary_backward_cpu);

}  // namespace libai::ops::cpu
