// Walking several strided layouts of one shape in step (CPU kernels only).
//
//   for_each_strided<3>(out.shape(), {out.strides(), a.strides(), b.strides()},
//                       {out.offset(), a.offset(), b.offset()},
//                       [&](const int64_t* off) { o[off[0]] = x[off[1]] + y[off[2]]; });
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace libai::ops::cpu {

template <int N, typename Fn>
void for_each_strided(const Shape& shape, const std::array<Shape, N>& strides,
                      const std::array<int64_t, N>& offsets, Fn&& fn) {
  const int rank = int(shape.size());
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  std::array<int64_t, N> pos = offsets;
  if (rank == 0) {
    fn(pos.data());
    return;
  }
  std::vector<int64_t> index(rank, 0);
  const int64_t inner = shape[rank - 1];
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = strides[k][rank - 1];
  for (int64_t done = 0; done < n; done += inner) {
    std::array<int64_t, N> p = pos;
    for (int64_t i = 0; i < inner; ++i) {
      fn(p.data());
      for (int k = 0; k < N; ++k) p[k] += inner_stride[k];
    }
    for (int d = rank - 2; d >= 0; --d) {
      for (int k = 0; k < N; ++k) pos[k] += strides[k][d];
      if (++index[d] < shape[d]) break;
      for (int k = 0; k < N; ++k) pos[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace libai::ops::cpu
