// A strided layout of N operands over one shape, small enough to pass to a CUDA kernel by
// value. Host code builds it with make_layout, which drops size-1 dims and merges dims that
// are contiguous in every operand, so most views fit in kMaxDims.
//
//   auto layout = make_layout<2>(out.shape(), {src.strides(), out.strides()}, "copy");
//   // kernel: offsets<2>(layout, linear_index, off) -> element offsets into each operand
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace libai::cuda {

inline constexpr int kMaxDims = 6;

template <int N>
struct StridedLayout {
  int rank = 0;
  int64_t numel = 1;
  int64_t shape[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
};

// Throws Unsupported (from a .cc, so that this header needs no libai error types) when the
// collapsed rank exceeds kMaxDims.
[[noreturn]] void throw_rank_unsupported(const char* what, int rank);

template <int N>
StridedLayout<N> make_layout(const std::vector<int64_t>& shape,
                             const std::array<std::vector<int64_t>, N>& strides, const char* what) {
  // Walk from the innermost dim outwards, merging a dim into the one inside it when every
  // operand steps over the inner dim exactly.
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, N>> steps;
  int64_t numel = 1;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    numel *= shape[d];
    if (shape[d] == 1) continue;
    bool merge = !dims.empty();
    for (int k = 0; k < N && merge; ++k) merge = strides[k][d] == steps.back()[k] * dims.back();
    if (merge) {
      dims.back() *= shape[d];
      continue;
    }
    std::array<int64_t, N> s;
    for (int k = 0; k < N; ++k) s[k] = strides[k][d];
    dims.push_back(shape[d]);
    steps.push_back(s);
  }
  if (int(dims.size()) > kMaxDims) throw_rank_unsupported(what, int(dims.size()));
  StridedLayout<N> layout;
  layout.rank = int(dims.size());
  layout.numel = numel;
  for (int i = 0; i < layout.rank; ++i) {
    const int d = layout.rank - 1 - i;  // back to outermost-first order
    layout.shape[d] = dims[i];
    for (int k = 0; k < N; ++k) layout.strides[k][d] = steps[i][k];
  }
  return layout;
}

#ifdef __CUDACC__
// Element offsets of the row-major linear index i in each operand.
template <int N>
__device__ __forceinline__ void offsets(const StridedLayout<N>& layout, int64_t i, int64_t* off) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = layout.rank - 1; d >= 0; --d) {
    const int64_t c = i % layout.shape[d];
    i /= layout.shape[d];
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += c * layout.strides[k][d];
  }
}
#endif

}  // namespace libai::cuda
