#include "ops/dropout.h"

#include "runtime/autograd.h"

namespace libai::ops {
namespace {

Tensor apply(const Tensor& x, double p, RngKey key) {
  Tensor input = x.is_contiguous() ? x : x.clone_raw();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernel<dropout_apply_slot>(x.device())(input, p, key, out);
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, RngKey key, bool training) {
  LIBAI_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p);
  LIBAI_CHECK(is_floating(x.dtype()), "dropout: expected a floating tensor, got ", x.dtype(),
              " of shape ", shape_str(x.shape()));
  if (!training || p == 0.0) return x;
  Tensor out = apply(x, p, key);
  // The same (key, index) pairs give the same mask: the gradient is dropout of the gradient.
  return autograd::record(out, "dropout", {x}, [p, key](const Tensor& g) {
    return std::vector<Tensor>{apply(g, p, key)};
  });
}

}  // namespace libai::ops
