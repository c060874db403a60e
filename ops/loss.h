// Cross-entropy over the last dim of logits, through a stable log-softmax, differentiable
// w.r.t. the logits. PyTorch's semantics: targets equal to ignore_index contribute nothing,
// and `mean` divides by the number of targets that are not ignored.
//
//   Tensor loss = ops::cross_entropy(logits, labels);                     // [N, C], [N] -> []
//   Tensor per_token = ops::cross_entropy(logits, labels, {.reduction = ops::Reduction::none});
//   Tensor smooth = ops::cross_entropy(logits, labels, {.label_smoothing = 0.1});
//
// logits: [..., C] floating; target: [...] i64 (or i32) with values in [0, C) or ignore_index.
// With label smoothing eps the target distribution is (1 - eps) onehot + eps / C.
// Unlike PyTorch, `mean` over targets that are all ignored gives 0, not NaN, so a fully
// padded micro-batch does not poison a step. A target out of range raises InvalidArgument
// naming its value and position.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

enum class Reduction : uint8_t { mean, sum, none };

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
};

Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options = {});

// logits contiguous [N, C], target contiguous i64 of N elements (its shape only names
// positions in errors). Writes per-row losses and log-sum-exp values ([N], f32 or f64; 0 for
// ignored rows) and returns the number of rows not ignored.
LIBAI_KERNEL_SLOT(cross_entropy_forward,
                  int64_t(const Tensor& logits, const Tensor& target,
                          const CrossEntropyOptions& options, Tensor& losses, Tensor& lse));
// grad_logits[i, c] = w_i * (softmax_ic - (1 - eps) [c == t_i] - eps / C), 0 for ignored rows;
// w_i = scale * grad_out[i] when grad_out has N elements, else scale * grad_out (a scalar).
LIBAI_KERNEL_SLOT(cross_entropy_backward,
                  void(const Tensor& logits, const Tensor& target, const Tensor& lse,
                       const Tensor& grad_out, double scale, const CrossEntropyOptions& options,
                       Tensor& grad_logits));

}  // namespace libai::ops
