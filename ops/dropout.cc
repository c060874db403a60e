#include "ops/dropout.h"

#include "ops/elementwise.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {

Tensor apply(const Tensor& x, double p, RngKey key) {
  Tensor input = x.is_contiguous() ? x : x.clone_raw();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernel<dropout_apply_slot>(x.device())(input, p, key, out);
  return out;
}

Tensor apply(const Tensor& x, double p, RngKey key, const DropoutCounter& counter) {
  Tensor input = x.is_contiguous() ? x : x.clone_raw();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  auto* fn = dropout_apply_counter_slot::table().functions[int(x.device().type)];
  if (fn) {
    fn(input, p, key, counter, out);
    return out;
  }
  // No kernel on this device: draw the mask (0 or 1 / (1 - p)) on the host, multiply there.
  Tensor ones = Tensor::ones(x.shape(), x.dtype());
  Tensor mask_host = Tensor::empty(x.shape(), x.dtype());
  kernel<dropout_apply_counter_slot>(Device::cpu())(ones, p, key, counter, mask_host);
  Tensor mask = Tensor::empty(x.shape(), x.dtype(), x.device());
  mask.copy_from(mask_host);
  autograd::NoGradGuard no_grad;
  return mul(input.detach(), mask);
}

// Note [Dropout of a slice]: the counter's base and per-dim strides.
DropoutCounter counter_of(const Tensor& x, const DropoutSlice& slice) {
  const int64_t n = x.dim();
  LIBAI_CHECK(slice.starts.empty() || int64_t(slice.starts.size()) == n, "dropout: slice starts ",
              shape_str(slice.starts), " do not match x of shape ", shape_str(x.shape()));
  LIBAI_CHECK(slice.logical_shape.empty() || int64_t(slice.logical_shape.size()) == n,
              "dropout: slice logical_shape ", shape_str(slice.logical_shape),
              " does not match x of shape ", shape_str(x.shape()));
  DropoutCounter c;
  c.strides.assign(size_t(n), 0);
  uint64_t stride = 1;
  for (int64_t d = n - 1; d >= 0; --d) {
    const int64_t start = slice.starts.empty() ? 0 : slice.starts[size_t(d)];
    const int64_t given = slice.logical_shape.empty() ? 0 : slice.logical_shape[size_t(d)];
    const int64_t logical = given == 0 ? x.size(d) : given;
    LIBAI_CHECK(start >= 0 && (d == 0 || start + x.size(d) <= logical), "dropout: x of shape ",
                shape_str(x.shape()), " at starts ", shape_str(slice.starts),
                " does not fit in the logical shape ", shape_str(slice.logical_shape), " (dim ", d,
                ")");
    c.strides[size_t(d)] = stride;
    c.base += uint64_t(start) * stride;
    stride *= uint64_t(logical);
  }
  return c;
}

void check_args(const Tensor& x, double p) {
  LIBAI_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p);
  LIBAI_CHECK(is_floating(x.dtype()), "dropout: expected a floating tensor, got ", x.dtype(),
              " of shape ", shape_str(x.shape()));
}

}  // namespace

Tensor dropout(const Tensor& x, double p, RngKey key, bool training) {
  check_args(x, p);
  if (!training || p == 0.0) return x;
  Tensor out = apply(x, p, key);
  // The same (key, index) pairs give the same mask: the gradient is dropout of the gradient.
  return autograd::record(out, "dropout", {x}, [p, key](const Tensor& g) {
    return std::vector<Tensor>{apply(g, p, key)};
  });
}

Tensor dropout(const Tensor& x, double p, RngKey key, bool training, const DropoutSlice& slice) {
  check_args(x, p);
  DropoutCounter counter = counter_of(x, slice);
  if (!training || p == 0.0) return x;
  Tensor out = apply(x, p, key, counter);
  return autograd::record(out, "dropout", {x}, [p, key, counter](const Tensor& g) {
    return std::vector<Tensor>{apply(g, p, key, counter)};
  });
}

}  // namespace libai::ops
