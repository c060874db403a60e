#include "runtime/cuda/copy_kernels.h"
#include "runtime/cuda/device_types.cuh"

namespace libai::cuda {
namespace {

constexpr int kThreads = 256;

// Same dtype: moves raw words of the element size.
template <typename Word>
__global__ void copy_words(Word* dst, const Word* src, StridedLayout<2> layout) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < layout.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets<2>(layout, i, off);
    dst[off[0]] = src[off[1]];
  }
}

template <typename D, typename S>
__global__ void copy_convert(D* dst, const S* src, StridedLayout<2> layout) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < layout.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets<2>(layout, i, off);
    // Through f64 when either side is f64, else through f32 (exact for the 16-bit formats).
    dst[off[0]] = store<D>(compute_type<D>(load(src[off[1]])));
  }
}

template <typename Word>
void launch_words(void* dst, const void* src, const StridedLayout<2>& layout, cudaStream_t s) {
  copy_words<Word><<<blocks_for(layout.numel, kThreads), kThreads, 0, s>>>(
      static_cast<Word*>(dst), static_cast<const Word*>(src), layout);
}

}  // namespace

bool launch_strided_copy(void* dst, int dst_dtype, size_t dst_element_size, const void* src,
                         int src_dtype, size_t src_element_size, const StridedLayout<2>& layout,
                         cudaStream_t stream) {
  if (layout.numel == 0) return true;
  if (dst_dtype == src_dtype) {
    switch (dst_element_size) {
      case 1: launch_words<uint8_t>(dst, src, layout, stream); return true;
      case 2: launch_words<uint16_t>(dst, src, layout, stream); return true;
      case 4: launch_words<uint32_t>(dst, src, layout, stream); return true;
      case 8: launch_words<uint64_t>(dst, src, layout, stream); return true;
      default: return false;
    }
  }
  (void)src_element_size;
  bool done = false;
  dispatch_float_code(dst_dtype, [&](auto d) {
    using D = decltype(d);
    done = dispatch_float_code(src_dtype, [&](auto s) {
      using S = decltype(s);
      copy_convert<D, S><<<blocks_for(layout.numel, kThreads), kThreads, 0, stream>>>(
          static_cast<D*>(dst), static_cast<const S*>(src), layout);
    });
  });
  return done;
}

}  // namespace libai::cuda
