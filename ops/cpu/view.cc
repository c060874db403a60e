// CPU kernel of ops/view.h: strided copy.
#include <cstring>

#include "ops/view.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

// The copy is dtype-agnostic: it moves elements as unsigned words of the element's size.
struct Layout {
  Shape shape, src_strides, dst_strides;
};

// Drops size-1 dims and merges neighbours that are contiguous with each other in both
// layouts, so that e.g. a column slice of a matrix becomes [rows, cols] with unit inner
// strides and the rows go through memcpy.
Layout collapse(const Tensor& src, const Tensor& dst) {
  Layout l;
  for (int d = 0; d < src.dim(); ++d) {
    if (src.shape()[d] == 1) continue;
    const int64_t n = src.shape()[d], ss = src.strides()[d], ds = dst.strides()[d];
    if (!l.shape.empty() && l.src_strides.back() == ss * n && l.dst_strides.back() == ds * n) {
      l.shape.back() *= n;
      l.src_strides.back() = ss;
      l.dst_strides.back() = ds;
      continue;
    }
    l.shape.push_back(n);
    l.src_strides.push_back(ss);
    l.dst_strides.push_back(ds);
  }
  if (l.shape.empty()) l = {{1}, {1}, {1}};
  return l;
}

template <typename Word>
void copy_words(const Word* src, Word* dst, const Layout& l) {
  const int rank = int(l.shape.size());
  const int64_t inner = l.shape.back();
  const int64_t inner_src = l.src_strides.back(), inner_dst = l.dst_strides.back();
  const int64_t rows = shape_numel(l.shape) / inner;
  const bool unit = inner_src == 1 && inner_dst == 1;
  // [rows, inner]: each chunk of rows is independent, so threads never share a destination.
  parallel_for(0, rows, std::max<int64_t>(1, (1 << 15) / inner), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t so = 0, dof = 0, rest = r;
      for (int d = rank - 2; d >= 0; --d) {
        const int64_t i = rest % l.shape[d];
        rest /= l.shape[d];
        so += i * l.src_strides[d];
        dof += i * l.dst_strides[d];
      }
      if (unit) {
        std::memcpy(dst + dof, src + so, size_t(inner) * sizeof(Word));
      } else {
        for (int64_t k = 0; k < inner; ++k) dst[dof + k * inner_dst] = src[so + k * inner_src];
      }
    }
  });
}

void copy_strided_cpu(const Tensor& src, Tensor& dst) {
  LIBAI_ASSERT(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "copy_strided: src ",
               shape_str(src.shape()), " ", src.dtype(), " vs dst ", shape_str(dst.shape()), " ",
               dst.dtype());
  if (src.numel() == 0) return;
  if (src.is_contiguous() && dst.is_contiguous()) {
    std::memmove(dst.data_ptr(), src.data_ptr(), src.nbytes());
    return;
  }
  const Layout l = collapse(src, dst);
  const void* s = src.data_ptr();
  void* d = dst.data_ptr();
  switch (src.element_size()) {
    case 1: return copy_words(static_cast<const uint8_t*>(s), static_cast<uint8_t*>(d), l);
    case 2: return copy_words(static_cast<const uint16_t*>(s), static_cast<uint16_t*>(d), l);
    case 4: return copy_words(static_cast<const uint32_t*>(s), static_cast<uint32_t*>(d), l);
    case 8: return copy_words(static_cast<const uint64_t*>(s), static_cast<uint64_t*>(d), l);
  }
  LIBAI_ASSERT(false, "copy_strided: element size ", src.element_size());
}

}  // namespace

LIBAI_REGISTER_KERNEL(copy_strided, DeviceType::cpu, copy_strided_cpu);

}  // namespace libai::ops::cpu
