#include "ops/cast.h"

#include "runtime/autograd.h"
#include "runtime/device_copy.h"

namespace libai::ops {

Tensor cast(const Tensor& x, DType dtype) {
  LIBAI_CHECK(x.defined(), "cast: undefined input");
  LIBAI_CHECK(is_floating(x.dtype()) && is_floating(dtype), "cast: expected floating dtypes, got ",
              x.dtype(), " -> ", dtype, " for a tensor of shape ", shape_str(x.shape()));
  if (x.dtype() == dtype) return x;
  const DType from = x.dtype();
  return autograd::record(to_dtype(x.detach(), dtype), "cast", {x}, [from](const Tensor& g) {
    return std::vector<Tensor>{to_dtype(g, from)};
  });
}

}  // namespace libai::ops
