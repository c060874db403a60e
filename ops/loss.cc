#include "ops/loss.h"

#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "runtime/autograd.h"
#include "runtime/device_copy.h"

namespace libai::ops {
namespace {

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : t.clone_raw(); }

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options) {
  LIBAI_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be floating, got ",
              logits.dtype(), " of shape ", shape_str(logits.shape()));
  LIBAI_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32,
              "cross_entropy: target must be i64 (or i32), got ", target.dtype());
  LIBAI_CHECK(logits.dim() >= 1 && logits.shape().back() > 0,
              "cross_entropy: logits must be [..., classes] with classes > 0, got shape ",
              shape_str(logits.shape()));
  const Shape batch_shape(logits.shape().begin(), logits.shape().end() - 1);
  LIBAI_CHECK(target.shape() == batch_shape, "cross_entropy: target of shape ",
              shape_str(target.shape()), " does not match logits ", shape_str(logits.shape()),
              "; expected ", shape_str(batch_shape));
  LIBAI_CHECK(target.device() == logits.device(), "cross_entropy: target on ", target.device(),
              " but logits on ", logits.device());
  LIBAI_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
              "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);

  const DType stat_dtype = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const int64_t rows = target.numel();
  Tensor x = contiguous(logits);
  Tensor t = contiguous(to_dtype(target, DType::i64));
  Tensor losses = Tensor::empty(batch_shape, stat_dtype, logits.device());
  Tensor lse = Tensor::empty({rows}, stat_dtype, logits.device());
  const int64_t count =
      kernel<cross_entropy_forward_slot>(logits.device())(x, t, options, losses, lse);

  Tensor out;
  double mean_scale = 1.0;  // the gradient's factor
  {
    autograd::NoGradGuard no_grad;
    if (options.reduction == Reduction::none) {
      out = to_dtype(losses, logits.dtype());
    } else {
      out = to_dtype(sum_all(losses), logits.dtype());
      if (options.reduction == Reduction::mean) {
        mean_scale = count > 0 ? 1.0 / double(count) : 0.0;
        out = scale(out, mean_scale);
      }
    }
  }
  Tensor xd = x.detach();
  return autograd::record(out, "cross_entropy", {logits},
                          [xd, t, lse, mean_scale, options](const Tensor& g) {
                            Tensor grad_out = contiguous(g);
                            Tensor grad = Tensor::empty(xd.shape(), xd.dtype(), xd.device());
                            kernel<cross_entropy_backward_slot>(xd.device())(
                                xd, t, lse, grad_out, mean_scale, options, grad);
                            return std::vector<Tensor>{grad};
                          });
}

}  // namespace libai::ops
