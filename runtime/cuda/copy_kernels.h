// Device-side strided copies, used by the cross-device copy (runtime/cuda/cuda_copy.cc)
// and by ops that gather strided views on the GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "runtime/cuda/strided_layout.h"

namespace libai::cuda {

// dst[layout.strides[0]] = convert(src[layout.strides[1]]) over layout's shape, on `stream`.
// Pointers already include the operands' offsets. dtypes are runtime/dtype.h codes; the
// same dtype copies any type by its element size, a conversion needs two floating dtypes.
// Returns false (launching nothing) for a conversion it does not cover.
bool launch_strided_copy(void* dst, int dst_dtype, size_t dst_element_size, const void* src,
                         int src_dtype, size_t src_element_size, const StridedLayout<2>& layout,
                         cudaStream_t stream);

}  // namespace libai::cuda
