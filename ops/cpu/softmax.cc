// CPU kernels of ops/softmax.h: rows in parallel, each row read from memory once (the
// extra passes over a row hit L1). f32 rows are used in place; 16-bit rows and masked rows
// are staged in an f32 buffer so that one vectorised row routine serves every case.
#include <cmath>
#include <vector>

#include "ops/cpu/vector_math.h"
#include "ops/softmax.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

constexpr int64_t kGrainElements = 1 << 14;

int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(cols, 1));
}

// Number of leading columns row `r` may see under the causal rule.
int64_t causal_limit(const SoftmaxArgs& args, int64_t r, int64_t cols) {
  if (!args.causal) return cols;
  const int64_t i = r % args.rows;
  return std::clamp<int64_t>(i + (cols - args.rows) + 1, 0, cols);
}

// out[0, n) = softmax or log_softmax of in[0, n); out[n, cols) = 0 or -inf.
template <typename C>
void row_forward(const C* in, C* out, int64_t n, int64_t cols, bool log) {
  const C masked = log ? C(-INFINITY) : C(0);
  C m;
  if constexpr (std::is_same_v<C, float>)
    m = max_f32(in, n);
  else {
    m = C(-INFINITY);
    for (int64_t j = 0; j < n; ++j) m = std::max(m, in[j]);
  }
  if (m == C(-INFINITY)) n = 0;  // fully masked: no NaN from -inf - -inf
  if constexpr (std::is_same_v<C, float>) {
    if (log) {
      const float shift = m + std::log(exp_sum_f32(in, m, nullptr, n));
      for (int64_t j = 0; j < n; ++j) out[j] = in[j] - shift;
    } else {
      const float inv = 1.0f / exp_sum_f32(in, m, out, n);
      for (int64_t j = 0; j < n; ++j) out[j] *= inv;
    }
  } else {
    C sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(in[j] - m);
    if (log) {
      const C shift = m + std::log(sum);
      for (int64_t j = 0; j < n; ++j) out[j] = in[j] - shift;
    } else {
      for (int64_t j = 0; j < n; ++j) out[j] = std::exp(in[j] - m) / sum;
    }
  }
  for (int64_t j = n; j < cols; ++j) out[j] = masked;
}

void softmax_forward_cpu(const Tensor& x, const SoftmaxArgs& args, Tensor& out) {
  dispatch_floating(x.dtype(), "softmax", [&]<typename T>() {
    using C = compute_t<T>;
    const int64_t cols = x.shape().back(), rows = x.numel() / cols;
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    const bool padded = args.key_padding_mask.defined();
    const auto* pad =
        padded ? static_cast<const uint8_t*>(args.key_padding_mask.data_ptr()) : nullptr;
    parallel_for(0, rows, row_grain(cols), [&](int64_t begin, int64_t end) {
      std::vector<C> in_buf, out_buf;
      if (padded || !std::is_same_v<T, C>) in_buf.resize(size_t(cols));
      if (!std::is_same_v<T, C>) out_buf.resize(size_t(cols));
      for (int64_t r = begin; r < end; ++r) {  // x: [rows, cols]
        const T* xr = xp + r * cols;
        T* orow = op + r * cols;
        const int64_t n = causal_limit(args, r, cols);
        const C* in;
        if (in_buf.empty()) {
          in = reinterpret_cast<const C*>(xr);  // T == C here
        } else {
          const uint8_t* pr = padded ? pad + (r / args.rows_per_batch) * cols : nullptr;
          for (int64_t j = 0; j < n; ++j) in_buf[j] = pr && pr[j] ? C(-INFINITY) : load(xr[j]);
          in = in_buf.data();
        }
        if constexpr (std::is_same_v<T, C>) {
          row_forward<C>(in, orow, n, cols, args.log);
        } else {
          row_forward<C>(in, out_buf.data(), n, cols, args.log);
          for (int64_t j = 0; j < cols; ++j) orow[j] = store<T>(out_buf[j]);
        }
      }
    });
  });
}

// One row of the backward pass; y, g and out have n entries.
template <typename C>
void row_backward(const C* y, const C* g, C* out, int64_t n, bool log) {
  if (log) {
    // Masked entries (y == -inf) neither receive nor contribute gradient.
    C sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += y[j] == C(-INFINITY) ? C(0) : g[j];
    for (int64_t j = 0; j < n; ++j) {
      C p;
      if constexpr (std::is_same_v<C, float>)
        p = exp_f32(y[j]);
      else
        p = std::exp(y[j]);
      out[j] = y[j] == C(-INFINITY) ? C(0) : g[j] - p * sum;
    }
    return;
  }
  C dot;
  if constexpr (std::is_same_v<C, float>)
    dot = dot_f32(g, y, n);
  else {
    dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += g[j] * y[j];
  }
  for (int64_t j = 0; j < n; ++j) out[j] = y[j] * (g[j] - dot);
}

void softmax_backward_cpu(const Tensor& y, const Tensor& grad, bool log, Tensor& grad_in) {
  dispatch_floating(y.dtype(), "softmax backward", [&]<typename T>() {
    using C = compute_t<T>;
    const int64_t cols = y.shape().back(), rows = y.numel() / cols;
    const T* yp = y.data<T>();
    const T* gp = grad.data<T>();
    T* op = grad_in.data<T>();
    parallel_for(0, rows, row_grain(cols), [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, C>) {
        for (int64_t r = begin; r < end; ++r)
          row_backward<C>(yp + r * cols, gp + r * cols, op + r * cols, cols, log);
      } else {
        const size_t n = size_t(cols);
        std::vector<C> yb(n), gb(n), ob(n);
        for (int64_t r = begin; r < end; ++r) {
          for (int64_t j = 0; j < cols; ++j) {
            yb[j] = load(yp[r * cols + j]);
            gb[j] = load(gp[r * cols + j]);
          }
          row_backward<C>(yb.data(), gb.data(), ob.data(), cols, log);
          for (int64_t j = 0; j < cols; ++j) op[r * cols + j] = store<T>(ob[j]);
        }
      }
    });
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(softmax_forward, DeviceType::cpu, softmax_forward_cpu);
LIBAI_REGISTER_KERNEL(softmax_backward, DeviceType::cpu, softmax_backward_cpu);

}  // namespace libai::ops::cpu
