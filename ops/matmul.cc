#include "ops/matmul.h"

#include <numeric>

#include "ops/broadcast.h"
#include "ops/reduce.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// The last two dims swapped, as a view (no copy, no autograd).
Tensor transpose_last(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return t.as_strided(shape, strides, t.offset());
}

std::vector<int> dims_with(int batch_rank, int extra) {
  std::vector<int> d(static_cast<size_t>(batch_rank));
  std::iota(d.begin(), d.end(), 0);
  d.push_back(extra);
  return d;
}

Tensor run_gemm(const Tensor& a, const Tensor& b, const Tensor& bias, const Shape& out_shape,
                const Shape& kernel_out_shape) {
  Tensor out = Tensor::empty(kernel_out_shape, a.dtype(), a.device());
  kernel<gemm_slot>(a.device())(a, b, bias, out);
  return out.as_strided(out_shape, contiguous_strides(out_shape), 0);
}

void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  LIBAI_CHECK(a.defined() && b.defined(), op, ": undefined operand");
  check_same_device(a, b, op);
  check_same_dtype(a, b, op);
  LIBAI_CHECK(is_floating(a.dtype()), op, ": expected floating operands, got ", a.dtype());
}

}  // namespace

// Note [Folding batch dims into one GEMM]
// One large GEMM runs much faster than a loop of small ones, so two common cases become a
// single call when strides allow it: a batched [.., m, k] times an unbatched [k, n] (linear,
// dA) merges the batch dims into m; and a product summed over all its batch dims (the
// weight gradient Aᵀ·dC) merges them into the contraction dim k.
Tensor gemm_raw(const Tensor& a, const Tensor& b, const Shape& out_shape, const Tensor& bias) {
  const int ra = a.dim(), rb = b.dim();
  const int64_t m = a.shape()[ra - 2], k = a.shape()[ra - 1], n = b.shape()[rb - 1];
  Shape batch = broadcast_shapes(batch_of(a), batch_of(b), "matmul");
  const int br = int(batch.size());
  const int orank = int(out_shape.size()) - 2;
  LIBAI_ASSERT(orank <= br && out_shape[orank] == m && out_shape[orank + 1] == n);
  Shape out_batch(size_t(br), 1);  // out's batch dims aligned to `batch`, 1 = summed
  for (int i = 0; i < orank; ++i) out_batch[size_t(br - orank + i)] = out_shape[size_t(i)];
  const int64_t batch_n = product(batch, 0, batch.size());
  const int64_t a_n = product(a.shape(), 0, size_t(ra - 2));
  const int64_t b_n = product(b.shape(), 0, size_t(rb - 2));
  const bool reduced_all = product(out_batch, 0, out_batch.size()) == 1;

  if (batch_n > 1 && out_batch == batch && b_n == 1 && a_n == batch_n) {
    int64_t rs = collapsed_stride(a, dims_with(ra - 2, ra - 2));
    if (rs >= 0) {
      Tensor a2 = a.as_strided({a_n * m, k}, {rs, a.strides()[ra - 1]}, a.offset());
      Tensor b2 = b.as_strided({k, n}, {b.strides()[rb - 2], b.strides()[rb - 1]}, b.offset());
      return run_gemm(a2, b2, bias, out_shape, {a_n * m, n});
    }
  }
  if (batch_n > 1 && reduced_all && a_n == batch_n && b_n == batch_n && !bias.defined()) {
    int64_t as = collapsed_stride(a, dims_with(ra - 2, ra - 1));
    int64_t bs = collapsed_stride(b, dims_with(rb - 2, rb - 2));
    if (as >= 0 && bs >= 0) {
      Tensor a2 = a.as_strided({m, batch_n * k}, {a.strides()[ra - 2], as}, a.offset());
      Tensor b2 = b.as_strided({batch_n * k, n}, {bs, b.strides()[rb - 1]}, b.offset());
      return run_gemm(a2, b2, bias, out_shape, {m, n});
    }
  }
  Shape a_shape = batch, b_shape = batch, kernel_out = out_batch;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  kernel_out.insert(kernel_out.end(), {m, n});
  return run_gemm(expand_view(a, a_shape), expand_view(b, b_shape), bias, out_shape, kernel_out);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "matmul");
  LIBAI_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: expected operands of rank >= 2, got ",
              shape_str(a.shape()), " and ", shape_str(b.shape()),
              " (view a vector as [1, k] or [k, 1])");
  LIBAI_CHECK(a.size(-1) == b.size(-2), "matmul: inner dimensions differ: a ", shape_str(a.shape()),
              " has k = ", a.size(-1), " but b ", shape_str(b.shape()), " has k = ", b.size(-2),
              " (expected a.shape[-1] == b.shape[-2])");
  Shape out_shape = broadcast_shapes(batch_of(a), batch_of(b), "matmul");
  out_shape.insert(out_shape.end(), {a.size(-2), b.size(-1)});
  Tensor out = gemm_raw(a, b, out_shape);
  const bool want_a = a.requires_grad() || !a.is_leaf();
  const bool want_b = b.requires_grad() || !b.is_leaf();
  Tensor ad = a.detach(), bd = b.detach();
  return autograd::record(out, "matmul", {a, b}, [ad, bd, want_a, want_b](const Tensor& g) {
    // dA = dC·Bᵀ, dB = Aᵀ·dC, each summed to its operand's (broadcast) shape.
    Tensor ga = want_a ? gemm_raw(g, transpose_last(bd), ad.shape()) : Tensor();
    Tensor gb = want_b ? gemm_raw(transpose_last(ad), g, bd.shape()) : Tensor();
    return std::vector<Tensor>{ga, gb};
  });
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "bmm");
  LIBAI_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0),
              "bmm: expected a [batch, m, k] and b [batch, k, n] with one batch size, got ",
              shape_str(a.shape()), " and ", shape_str(b.shape()));
  return matmul(a, b);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_operands(x, weight, "linear");
  LIBAI_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
              "linear: expected x [..., in] and weight [out, in], got x ", shape_str(x.shape()),
              " and weight ", shape_str(weight.shape()));
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  Tensor b;
  if (bias.defined()) {
    check_same_device(x, bias, "linear");
    check_same_dtype(x, bias, "linear");
    LIBAI_CHECK(bias.dim() == 1 && bias.size(0) == out_features, "linear: bias of shape ",
                shape_str(bias.shape()), " does not match weight ", shape_str(weight.shape()),
                " (expected [", out_features, "])");
    b = bias.is_contiguous() ? bias.detach() : bias.clone_raw();
  }
  // A vector x [in] is one row [1, in].
  Tensor x2 = x.dim() == 1 ? x.as_strided({1, in_features}, {0, x.stride(0)}, x.offset()) : x;
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Shape out2 = x2.shape();
  out2.back() = out_features;
  Tensor out = gemm_raw(x2, transpose_last(weight), out2, b);
  out = out.as_strided(out_shape, contiguous_strides(out_shape), 0);
  const bool want_x = x.requires_grad() || !x.is_leaf();
  const bool want_w = weight.requires_grad() || !weight.is_leaf();
  const bool want_b = bias.defined() && (bias.requires_grad() || !bias.is_leaf());
  Tensor xd = x2.detach(), wd = weight.detach();
  Shape x_shape = x.shape();
  return autograd::record(
      out, "linear", {x, weight, bias},
      [xd, wd, x_shape, out2, want_x, want_w, want_b](const Tensor& g) {
        Tensor g2 =
            g.as_strided(out2, g.dim() == 1 ? Shape{0, g.stride(0)} : g.strides(), g.offset());
        Tensor gx, gw, gb;
        if (want_x) {
          Shape shape2 = xd.shape();
          gx = gemm_raw(g2, wd, shape2);  // [..., out] x [out, in]
          gx = gx.as_strided(x_shape, contiguous_strides(x_shape), 0);
        }
        if (want_w) gw = gemm_raw(transpose_last(g2), xd, wd.shape());  // gᵀ·x: [out, in]
        if (want_b) {
          std::vector<int64_t> dims(size_t(g2.dim() - 1));
          std::iota(dims.begin(), dims.end(), 0);
          gb = sum(g2, dims);
        }
        return std::vector<Tensor>{gx, gw, gb};
      });
}

}  // namespace libai::ops
