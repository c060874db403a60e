#include "ops/optimizer.h"

#include <cmath>

namespace libai::ops {
namespace {

// Every tensor of one update: defined, contiguous f32 with the parameter's numel and device.
void check_state(const Tensor& param, const Tensor& t, const char* op, const char* what) {
  LIBAI_CHECK(t.defined(), op, ": ", what, " is undefined");
  LIBAI_CHECK(t.dtype() == DType::f32, op, ": ", what, " must be f32, got ", t.dtype(), " (shape ",
              shape_str(t.shape()), ")");
  LIBAI_CHECK(t.is_contiguous(), op, ": ", what, " of shape ", shape_str(t.shape()),
              " must be contiguous");
  LIBAI_CHECK(t.numel() == param.numel(), op, ": ", what, " of shape ", shape_str(t.shape()),
              " has ", t.numel(), " elements, the parameter (shape ", shape_str(param.shape()),
              ") has ", param.numel());
  check_same_device(param, t, op);
}

}  // namespace

void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& hyper) {
  const char* op = "adamw_update";
  check_state(param, param, op, "param");
  check_state(param, grad, op, "grad");
  check_state(param, exp_avg, op, "exp_avg");
  check_state(param, exp_avg_sq, op, "exp_avg_sq");
  LIBAI_CHECK(hyper.step >= 1, op, ": step counts from 1, got ", hyper.step);
  LIBAI_CHECK(hyper.lr >= 0 && std::isfinite(hyper.lr), op, ": lr must be finite and >= 0, got ",
              hyper.lr);
  LIBAI_CHECK(hyper.beta1 >= 0 && hyper.beta1 < 1, op, ": beta1 must be in [0, 1), got ",
              hyper.beta1);
  LIBAI_CHECK(hyper.beta2 >= 0 && hyper.beta2 < 1, op, ": beta2 must be in [0, 1), got ",
              hyper.beta2);
  LIBAI_CHECK(hyper.eps >= 0, op, ": eps must be >= 0, got ", hyper.eps);
  LIBAI_CHECK(hyper.weight_decay >= 0, op, ": weight_decay must be >= 0, got ", hyper.weight_decay);
  if (param.numel() == 0) return;
  kernel<adamw_update_apply_slot>(param.device())(param, grad, exp_avg, exp_avg_sq, hyper);
}

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdHyper& hyper) {
  const char* op = "sgd_update";
  check_state(param, param, op, "param");
  check_state(param, grad, op, "grad");
  LIBAI_CHECK(hyper.lr >= 0 && std::isfinite(hyper.lr), op, ": lr must be finite and >= 0, got ",
              hyper.lr);
  LIBAI_CHECK(hyper.momentum >= 0, op, ": momentum must be >= 0, got ", hyper.momentum);
  LIBAI_CHECK(hyper.weight_decay >= 0, op, ": weight_decay must be >= 0, got ", hyper.weight_decay);
  LIBAI_CHECK(!hyper.nesterov || (hyper.momentum > 0 && hyper.dampening == 0), op,
              ": nesterov needs momentum > 0 and dampening 0, got momentum ", hyper.momentum,
              " and dampening ", hyper.dampening);
  if (hyper.momentum != 0) check_state(param, momentum_buffer, op, "momentum_buffer");
  if (param.numel() == 0) return;
  kernel<sgd_update_apply_slot>(param.device())(param, grad, momentum_buffer, hyper);
}

}  // namespace libai::ops
