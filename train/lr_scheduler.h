// LiBai's learning-rate schedules (libai/scheduler/lr_scheduler.py): a warmup in front of one
// of OneFlow's decay schedules, as a pure function of the iteration.
//
//   LrScheduler scheduler({.kind = LrSchedule::warmup_cosine, .max_iter = 1000,
//                          .warmup_iter = 100, .warmup_factor = 0.001});
//   for (auto& group : optimizer.groups()) group.lr = scheduler.lr(group.base_lr, iter);
//
// lr(base, i) is the lr of optimizer step i (0-based): OneFlow's schedulers step once when
// built (last_step 0) and once after every optimizer step. With b the base lr and decay(i)
// the schedule below, W = warmup_iter, f = warmup_factor:
//
//   i >= W (or W == 0)       decay(i)                     (not shifted by the warmup)
//   i <  W, "constant"       b f
//   i <  W, "linear"         b (f + (e - f) i / W),  e = decay(W) / b
//
//   WarmupCosineLR           b ((1 - alpha) (1 + cos(pi i / max_iter)) / 2 + alpha), i < max_iter;
//                            b alpha after
//   WarmupCosineAnnealingLR  eta_min + (b - eta_min) (1 + cos(pi i / max_iter)) / 2  (periodic:
//                            it rises again after max_iter, as OneFlow's closed form does)
//   WarmupStepLR             b gamma^floor(i / step_size)
//   WarmupMultiStepLR        b gamma^(number of milestones <= i)
//   WarmupExponentialLR      b gamma^i
//   WarmupPolynomialLR       (b - end) (1 - t / T)^power + end, T = max_iter, t = min(i, T);
//                            cycle: t = max(i, 1), T = max_iter ceil(t / max_iter)
//
// Note [LiBai's warmup and torch's]
// The linear warmup ends at the decay schedule's value at W, and the decay keeps counting
// from 0 (OneFlow's WarmupLR with warmup_prefix false). torch's SequentialLR instead restarts
// the second schedule at the milestone. OneFlow refuses a linear warmup over groups of
// different base lrs; here each base lr gets its own end factor e, which is the same thing
// for the schedules whose value is proportional to b (all but cosine annealing with eta_min
// and polynomial with end_learning_rate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace libai::train {

enum class LrSchedule {
  warmup_cosine,
  warmup_cosine_annealing,
  warmup_step,
  warmup_multistep,
  warmup_exponential,
  warmup_polynomial
};

// "WarmupCosineLR", "WarmupCosineAnnealingLR", "WarmupStepLR", "WarmupMultiStepLR",
// "WarmupExponentialLR", "WarmupPolynomialLR"; InvalidArgument listing them otherwise.
LrSchedule lr_schedule_from_name(const std::string& libai_name);
const char* lr_schedule_name(LrSchedule schedule);

struct LrSchedulerOptions {
  LrSchedule kind = LrSchedule::warmup_cosine;
  int64_t max_iter = 0, warmup_iter = 0;
  double warmup_factor = 0.001;
  std::string warmup_method = "linear";  // "linear" | "constant"
  double alpha = 0.0;                    // cosine decay floor (fraction of base lr)
  double eta_min = 0.0;                  // cosine annealing floor (absolute)
  int64_t step_size = 1;
  double gamma = 0.1;
  std::vector<int64_t> milestones;  // in iterations, increasing
  double power = 1.0, end_learning_rate = 1e-4;
  bool cycle = false;
};

class LrScheduler {
 public:
  // InvalidArgument naming the option: max_iter > 0 where the schedule divides by it,
  // warmup_iter >= 0, warmup_factor in [0, 1], step_size > 0, gamma > 0, milestones
  // increasing, an unknown warmup_method.
  explicit LrScheduler(LrSchedulerOptions options);
  // The lr that optimizer step `iter` (0-based) uses.
  double lr(double base_lr, int64_t iter) const;
  const LrSchedulerOptions& options() const { return options_; }

 private:
  double decay(double base_lr, int64_t iter) const;
  LrSchedulerOptions options_;
};

}  // namespace libai::train
