#include "ops/cast.h"

#include "runtime/autograd.h"
#include "runtime/device_copy.h"

namespace libai::ops {
namespace {

// Autocast converts whole weight matrices and logits every step, so the CPU runs a
// contiguous conversion kernel on the device's threads instead of to_dtype's per-element walk.
Tensor convert(const Tensor& x, DType dtype) {
  auto* fn = cast_slot::table().functions[int(x.device().type)];
  if (fn == nullptr || !x.is_contiguous()) return to_dtype(x, dtype);
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  fn(x, out);
  return out;
}

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  LIBAI_CHECK(x.defined(), "cast: undefined input");
  LIBAI_CHECK(is_floating(x.dtype()) && is_floating(dtype), "cast: expected floating dtypes, got ",
              x.dtype(), " -> ", dtype, " for a tensor of shape ", shape_str(x.shape()));
  if (x.dtype() == dtype) return x;
  const DType from = x.dtype();
  return autograd::record(convert(x.detach(), dtype), "cast", {x}, [from](const Tensor& g) {
    return std::vector<Tensor>{convert(g, from)};
  });
}

}  // namespace libai::ops
