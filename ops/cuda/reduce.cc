// Registers the CUDA kernels of ops/reduce.h (compute in ops/cuda/reduce.cu).
#include <algorithm>

#include "ops/cuda/common.h"
#include "ops/cuda/launchers.h"
#include "ops/reduce.h"

namespace libai::ops::cuda {
namespace {

using libai::cuda::make_layout;

// Splits x's dims into kept (strides of x and out) and reduced (strides of x).
void split_layout(const Tensor& x, const Tensor& out, const std::vector<int>& dims,
                  libai::cuda::StridedLayout<2>& kept, libai::cuda::StridedLayout<1>& reduced,
                  const char* op) {
  Shape kept_shape, kept_x, kept_out, reduced_shape, reduced_x;
  for (int d = 0; d < x.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) {
      reduced_shape.push_back(x.shape()[d]);
      reduced_x.push_back(x.strides()[d]);
    } else {
      kept_shape.push_back(x.shape()[d]);
      kept_x.push_back(x.strides()[d]);
      kept_out.push_back(out.strides()[d]);
    }
  }
  kept = make_layout<2>(kept_shape, {kept_x, kept_out}, op);
  reduced = make_layout<1>(reduced_shape, {reduced_x}, op);
}

// out: x's shape with the reduced dims set to 1, contiguous.
void reduce_sum_cuda(const Tensor& x, const std::vector<int>& dims, Tensor& out) {
  const int code = float_code(x.dtype(), "sum");
  libai::cuda::StridedLayout<2> kept;
  libai::cuda::StridedLayout<1> reduced;
  split_layout(x, out, dims, kept, reduced, "sum");
  OnDevice on(out);
  launch_reduce_sum(code, out.data_ptr(), x.data_ptr(), kept, reduced, on.stream);
  on.check_launch("sum kernel");
}

void reduce_max_cuda(const Tensor& x, int dim, Tensor& values, Tensor& indices) {
  LIBAI_CHECK(x.shape()[dim] > 0, "max: dimension ", dim, " of ", shape_str(x.shape()),
              " is empty");
  const int code = float_code(x.dtype(), "max");
  libai::cuda::StridedLayout<2> kept;
  libai::cuda::StridedLayout<1> reduced;
  split_layout(x, values, {dim}, kept, reduced, "max");
  OnDevice on(values);
  launch_reduce_max(code, values.data_ptr(), static_cast<int64_t*>(indices.data_ptr()),
                    x.data_ptr(), kept, reduced, on.stream);
  on.check_launch("max kernel");
}

}  // namespace

LIBAI_REGISTER_KERNEL(reduce_sum, DeviceType::cuda, reduce_sum_cuda);
LIBAI_REGISTER_KERNEL(reduce_max, DeviceType::cuda, reduce_max_cuda);

}  // namespace libai::ops::cuda
