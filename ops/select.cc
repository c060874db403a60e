#include "ops/select.h"

#include "ops/broadcast.h"
#include "ops/view.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {

void check_condition(const Tensor& cond, const char* op, const char* what) {
  LIBAI_CHECK(cond.dtype() == DType::boolean || cond.dtype() == DType::u8, op, ": ", what,
              " must be bool or u8, got ", cond.dtype(), " (shape ", shape_str(cond.shape()), ")");
}

Tensor where_raw(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  kernel<where_forward_slot>(a.device())(expand_view(cond, shape), expand_view(a, shape),
                                         expand_view(b, shape), out);
  return out;
}

Tensor zero_like_scalar(const Tensor& g) { return Tensor::zeros({}, g.dtype(), g.device()); }

Tensor dense(const Tensor& t) {
  autograd::NoGradGuard no_grad;
  return contiguous(t).detach();
}

// x viewed as [outer, n, inner] around dim d (x contiguous).
Shape around(const Tensor& x, int d) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.shape()[i];
  for (int i = d + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  return {outer, x.shape()[d], inner};
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_same_device(a, b, name);
  check_same_dtype(a, b, name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, DType::boolean, a.device());
  kernel<compare_slot>(a.device())(op, expand_view(a, shape), expand_view(b, shape), out);
  return out;
}

}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_condition(cond, "where", "cond");
  check_same_device(a, b, "where");
  check_same_device(cond, a, "where");
  check_same_dtype(a, b, "where");
  Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = where_raw(cond, a, b, shape);
  if (!is_floating(a.dtype())) return out;
  Tensor c = cond.detach();
  Shape sa = a.shape(), sb = b.shape();
  return autograd::record(out, "where", {a, b}, [c, sa, sb, shape](const Tensor& g) {
    Tensor zero = zero_like_scalar(g);
    return std::vector<Tensor>{dense(sum_to(where_raw(c, g, zero, shape), sa)),
                               dense(sum_to(where_raw(c, zero, g, shape), sb))};
  });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_condition(mask, "masked_fill", "mask");
  check_same_device(x, mask, "masked_fill");
  Shape joint = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  LIBAI_CHECK(joint == x.shape(), "masked_fill: mask of shape ", shape_str(mask.shape()),
              " does not broadcast to the input's shape ", shape_str(x.shape()));
  Tensor fill = Tensor::full({}, value, x.dtype(), x.device());
  Tensor out = where_raw(mask, fill, x, x.shape());
  if (!is_floating(x.dtype())) return out;
  Tensor m = mask.detach();
  Shape shape = x.shape();
  return autograd::record(out, "masked_fill", {x}, [m, shape](const Tensor& g) {
    return std::vector<Tensor>{where_raw(m, zero_like_scalar(g), g, shape)};
  });
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  int d = normalize_dim(dim, x.dim(), "argmax");
  LIBAI_CHECK(x.shape()[d] > 0, "argmax: dim ", dim, " of shape ", shape_str(x.shape()),
              " is empty");
  Shape s3 = around(x, d);
  Tensor xd = dense(x);
  Tensor indices = Tensor::empty({s3[0], s3[2]}, DType::i64, x.device());
  kernel<argmax_forward_slot>(x.device())(xd.as_strided(s3, contiguous_strides(s3), xd.offset()),
                                          indices);
  Shape shape = x.shape();
  if (keepdim)
    shape[d] = 1;
  else
    shape.erase(shape.begin() + d);
  return indices.as_strided(shape, contiguous_strides(shape), 0);
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest,
                               bool /*sorted*/) {
  int d = normalize_dim(dim, x.dim(), "topk");
  LIBAI_CHECK(is_floating(x.dtype()), "topk: expected a floating tensor, got ", x.dtype());
  LIBAI_CHECK(k >= 0 && k <= x.shape()[d], "topk: k = ", k, " is out of range for dim ", dim,
              " of shape ", shape_str(x.shape()));
  Shape s3 = around(x, d);
  Tensor xd = dense(x);
  Tensor values = Tensor::empty({s3[0], k, s3[2]}, x.dtype(), x.device());
  Tensor indices = Tensor::empty({s3[0], k, s3[2]}, DType::i64, x.device());
  kernel<topk_forward_slot>(x.device())(xd.as_strided(s3, contiguous_strides(s3), xd.offset()), k,
                                        largest, values, indices);
  Shape shape = x.shape();
  shape[d] = k;
  Tensor idx3 = indices;
  values = values.as_strided(shape, contiguous_strides(shape), 0);
  indices = indices.as_strided(shape, contiguous_strides(shape), 0);
  Shape in_shape = x.shape();
  values = autograd::record(values, "topk", {x}, [idx3, s3, in_shape](const Tensor& g) {
    Tensor gd = dense(g);
    Tensor gx = Tensor::zeros(s3, g.dtype(), g.device());
    kernel<topk_backward_slot>(g.device())(
        gd.as_strided(idx3.shape(), contiguous_strides(idx3.shape()), gd.offset()), idx3, gx);
    return std::vector<Tensor>{gx.as_strided(in_shape, contiguous_strides(in_shape), 0)};
  });
  return {values, indices};
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(CompareOp::eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(CompareOp::ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(CompareOp::lt, a, b, "lt"); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(CompareOp::gt, a, b, "gt"); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(CompareOp::le, a, b, "le"); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(CompareOp::ge, a, b, "ge"); }

}  // namespace libai::ops
