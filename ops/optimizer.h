// Fused optimizer updates: one pass over a parameter tensor and its state per step, reading
// each element once and writing it once (train/optimizer.h drives them per parameter).
//
//   ops::AdamWHyper hyper{.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
//                         .weight_decay = 0.01, .step = 1};
//   ops::adamw_update(param, param.grad(), exp_avg, exp_avg_sq, hyper);   // in place
//   ops::sgd_update(param, param.grad(), buffer, {.lr = 0.1, .momentum = 0.9, ...});
//
// The arithmetic is torch.optim's single-tensor path, element by element:
//
//   AdamW (decoupled weight decay; step counts from 1, bc1 = 1 - beta1^step,
//          bc2 = 1 - beta2^step, both 1 without bias correction):
//     p *= 1 - lr * weight_decay
//     m  = lerp(m, g, 1 - beta1)                  // = beta1 m + (1 - beta1) g
//     v  = beta2 v + (1 - beta2) g^2
//     p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
//   SGD (coupled weight decay, torch's momentum buffer):
//     g' = g + weight_decay p
//     buf = first step ? g' : momentum buf + (1 - dampening) g'
//     d  = nesterov ? g' + momentum buf : buf     // d = g' without momentum
//     p -= lr d
//
// Scalars (1 - lr wd, lr / bc1, sqrt(bc2), ...) are computed in double and applied in f32,
// as torch does for f32 tensors.
//
// Note [LiBai's updates and torch's]
// LiBai runs OneFlow's optimizers, which differ from torch's in three ways; these kernels
// follow torch (the parity target):
//   - AdamW: OneFlow updates p - step m / denom - lr wd p from the old p in one expression;
//     torch shrinks p first. Equal in exact arithmetic, different roundings.
//   - AdamW: OneFlow's bias correction counts the optimizer's steps; torch counts each
//     parameter's own steps (a parameter without a gradient on some step falls behind).
//     train/optimizer.h counts per parameter, like torch.
//   - SGD with momentum: OneFlow starts the buffer at zero (first buf = (1 - dampening) g);
//     torch starts it at g. They differ when dampening != 0.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"
#include "runtime/tensor.h"

namespace libai::ops {

struct AdamWHyper {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // this update's number, from 1 (bias correction uses it)
  bool bias_correction = true;
};

// param, grad, exp_avg, exp_avg_sq: contiguous f32 tensors of equal numel on one device.
// Updates param, exp_avg and exp_avg_sq in place.
void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& hyper);

struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first_step;  // the buffer is written as g' (its contents are not read)
};

// param, grad (and momentum_buffer when momentum != 0): contiguous f32 of equal numel.
// momentum_buffer is left undefined when momentum == 0.
void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdHyper& hyper);

// Kernels: the tensors are checked by the front ends above.
LIBAI_KERNEL_SLOT(adamw_update_apply, void(Tensor& param, const Tensor& grad, Tensor& exp_avg,
                                           Tensor& exp_avg_sq, const AdamWHyper& hyper));
LIBAI_KERNEL_SLOT(sgd_update_apply, void(Tensor& param, const Tensor& grad, Tensor& momentum_buffer,
                                         const SgdHyper& hyper));

}  // namespace libai::ops
