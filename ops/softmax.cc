#include "ops/softmax.h"

#include <utility>

#include "runtime/autograd.h"
#include "runtime/device_copy.h"

namespace libai::ops {
namespace {

// A contiguous copy of `t` with dims d and -1 swapped (its own inverse); t itself if d is last.
Tensor swap_with_last(const Tensor& t, int d) {
  const int last = t.dim() - 1;
  if (d == last) return t.is_contiguous() ? t : t.clone_raw();
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[d], shape[last]);
  std::swap(strides[d], strides[last]);
  return t.as_strided(shape, strides, t.offset()).clone_raw();
}

SoftmaxArgs make_args(const Tensor& x, int d, const SoftmaxMask& mask, bool log, const char* name) {
  SoftmaxArgs args;
  args.log = log;
  const bool masked = mask.causal || mask.key_padding_mask.defined();
  if (!masked) return args;
  LIBAI_CHECK(d == x.dim() - 1, name, ": masks apply over the last dim, got dim ", d,
              " for input of shape ", shape_str(x.shape()));
  LIBAI_CHECK(x.dim() >= 2, name, ": a mask needs an input of at least 2 dims [..., rows, cols],",
              " got shape ", shape_str(x.shape()));
  const int64_t cols = x.shape().back();
  args.causal = mask.causal;
  args.rows = x.shape()[x.dim() - 2];
  if (mask.key_padding_mask.defined()) {
    const Tensor& pad = mask.key_padding_mask;
    LIBAI_CHECK(pad.dim() == 2 && pad.shape()[0] == x.shape()[0] && pad.shape()[1] == cols, name,
                ": key_padding_mask of shape ", shape_str(pad.shape()), " does not match input ",
                shape_str(x.shape()), "; expected [", x.shape()[0], ", ", cols, "]");
    LIBAI_CHECK(!is_floating(pad.dtype()), name, ": key_padding_mask must be bool or integer, got ",
                pad.dtype());
    LIBAI_CHECK(pad.device() == x.device(), name, ": key_padding_mask on ", pad.device(),
                " but input on ", x.device());
    // bool and u8 are one byte each and read as u8 by the kernels; wider integers become
    // bool (v != 0), so 256 stays masked.
    Tensor bytes = pad.dtype() == DType::u8 || pad.dtype() == DType::boolean
                       ? pad
                       : to_dtype(pad, DType::boolean);
    args.key_padding_mask = bytes.is_contiguous() ? bytes : bytes.clone_raw();
    args.rows_per_batch = x.numel() / (x.shape()[0] * cols);
  }
  return args;
}

Tensor softmax_impl(const Tensor& x, int64_t dim, const SoftmaxMask& mask, bool log,
                    const char* name) {
  LIBAI_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", x.dtype(),
              " of shape ", shape_str(x.shape()));
  LIBAI_CHECK(x.dim() >= 1, name, ": expected at least 1 dim, got a scalar");
  const int d = normalize_dim(dim, x.dim(), name);
  SoftmaxArgs args = make_args(x, d, mask, log, name);
  Tensor input = swap_with_last(x, d);
  Tensor out_t = Tensor::empty(input.shape(), x.dtype(), x.device());
  if (input.numel() > 0) kernel<softmax_forward_slot>(x.device())(input, args, out_t);
  Tensor out = swap_with_last(out_t, d);
  if (!autograd::needs_grad({x})) return out;
  Tensor y_t = out_t.detach();
  return autograd::record(out, name, {x}, [y_t, d, log](const Tensor& g) {
    Tensor g_t = swap_with_last(g, d);
    Tensor grad_t = Tensor::empty(g_t.shape(), g_t.dtype(), g_t.device());
    if (g_t.numel() > 0) kernel<softmax_backward_slot>(g_t.device())(y_t, g_t, log, grad_t);
    return std::vector<Tensor>{swap_with_last(grad_t, d)};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, const SoftmaxMask& mask) {
  return softmax_impl(x, dim, mask, false, "softmax");
}

Tensor log_softmax(const Tensor& x, int64_t dim, const SoftmaxMask& mask) {
  return softmax_impl(x, dim, mask, true, "log_softmax");
}

}  // namespace libai::ops
