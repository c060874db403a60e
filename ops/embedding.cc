#include "ops/embedding.h"

#include "ops/view.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {

Tensor dense(const Tensor& t) {
  autograd::NoGradGuard no_grad;
  return contiguous(t).detach();
}

// "[1, 3]" for flat position 7 of shape [2, 4].
std::string position_str(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(index);
}

void check_ids(const Tensor& ids, int64_t rows, const char* op, const char* what) {
  LIBAI_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32, op,
              ": ids must be i64 or i32, got ", ids.dtype(), " (shape ", shape_str(ids.shape()),
              ")");
  if (!ids.device().is_cpu()) return;  // device kernels check on the device
  auto values = ids.to_vector<int64_t>();
  for (size_t p = 0; p < values.size(); ++p)
    LIBAI_CHECK(values[p] >= 0 && values[p] < rows, op, ": id ", values[p], " at position ",
                position_str(int64_t(p), ids.shape()), " of ids ", shape_str(ids.shape()),
                " is out of range for ", what, " of ", rows, " rows (valid: 0..", rows - 1, ")");
}

// x [outer, n, inner] gathered at ids [k] -> [outer, k, inner], with the scatter-add backward.
Tensor gather_rows(const Tensor& x, const Tensor& flat_ids, int64_t outer, int64_t n, int64_t inner,
                   std::optional<int64_t> skip, const char* name, const Tensor& grad_target) {
  const int64_t k = flat_ids.numel();
  Tensor xd = dense(x);
  Tensor x3 = xd.as_strided({outer, n, inner}, contiguous_strides({outer, n, inner}), xd.offset());
  Tensor out = Tensor::empty({outer, k, inner}, x.dtype(), x.device());
  kernel<index_select_forward_slot>(x.device())(x3, flat_ids, out);
  Shape in_shape = x.shape();
  int64_t skip_id = skip.value_or(-1);
  return autograd::record(out, name, {grad_target}, [=](const Tensor& g) {
    Tensor gd = dense(g);
    Tensor g3 =
        gd.as_strided({outer, k, inner}, contiguous_strides({outer, k, inner}), gd.offset());
    Tensor gx = Tensor::zeros({outer, n, inner}, g.dtype(), g.device());
    kernel<index_add_backward_slot>(g.device())(g3, flat_ids, skip_id, gx);
    return std::vector<Tensor>{gx.as_strided(in_shape, contiguous_strides(in_shape), 0)};
  });
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<int64_t> padding_idx) {
  LIBAI_CHECK(weight.dim() == 2, "embedding: weight must be [V, H], got shape ",
              shape_str(weight.shape()));
  LIBAI_CHECK(is_floating(weight.dtype()), "embedding: weight must be floating, got ",
              weight.dtype());
  check_same_device(weight, ids, "embedding");
  const int64_t vocab = weight.shape()[0], hidden = weight.shape()[1];
  if (padding_idx) {
    int64_t p = *padding_idx < 0 ? *padding_idx + vocab : *padding_idx;
    LIBAI_CHECK(p >= 0 && p < vocab, "embedding: padding_idx ", *padding_idx,
                " is out of range for a table of ", vocab, " rows");
    padding_idx = p;
  }
  check_ids(ids, vocab, "embedding", "a table");
  Tensor flat = dense(ids);
  flat = flat.as_strided({ids.numel()}, {1}, flat.offset());
  Tensor rows = gather_rows(weight, flat, 1, vocab, hidden, padding_idx, "embedding", weight);
  Shape shape = ids.shape();
  shape.push_back(hidden);
  // [..., H] from [1, N, H]: a shape-only change recorded by view().
  return view(rows, shape);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& ids) {
  int d = normalize_dim(dim, x.dim(), "index_select");
  check_same_device(x, ids, "index_select");
  LIBAI_CHECK(ids.dim() == 1, "index_select: ids must be 1-d, got shape ", shape_str(ids.shape()));
  check_ids(ids, x.shape()[d], "index_select", str_cat("dim ", dim).c_str());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.shape()[i];
  for (int i = d + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  Tensor flat = dense(ids);
  Tensor rows = gather_rows(x, flat, outer, x.shape()[d], inner, std::nullopt, "index_select", x);
  Shape shape = x.shape();
  shape[d] = ids.numel();
  return view(rows, shape);
}

}  // namespace libai::ops
