#include "ops/broadcast.h"

#include "ops/reduce.h"

namespace libai::ops {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    LIBAI_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ",
                shape_str(b), " cannot be broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor expand_view(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  LIBAI_CHECK(shape.size() >= x.shape().size(), "expand: cannot expand ", shape_str(x.shape()),
              " to fewer dimensions ", shape_str(shape));
  size_t lead = shape.size() - x.shape().size();
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < x.shape().size(); ++i) {
    int64_t dx = x.shape()[i], ds = shape[lead + i];
    LIBAI_CHECK(dx == ds || dx == 1, "expand: cannot expand ", shape_str(x.shape()), " to ",
                shape_str(shape));
    strides[lead + i] = dx == 1 ? 0 : x.strides()[i];
  }
  return x.as_strided(shape, strides, x.offset());
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  size_t lead = g.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < g.shape().size(); ++i) {
    bool broadcast = i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1);
    if (broadcast) dims.push_back(int64_t(i));
  }
  Tensor summed = sum(g, dims, /*keepdim=*/true);
  // Drop the leading dims that `shape` does not have.
  return summed.as_strided(shape, Shape(summed.strides().begin() + lead, summed.strides().end()),
                           summed.offset());
}

}  // namespace libai::ops
