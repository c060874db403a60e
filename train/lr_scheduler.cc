// LiBai's schedules: the formulas in train/lr_scheduler.h.
#include "train/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "runtime/error.h"

namespace libai::train {
namespace {

constexpr std::pair<const char*, LrSchedule> kNames[] = {
    {"WarmupCosineLR", LrSchedule::warmup_cosine},
    {"WarmupCosineAnnealingLR", LrSchedule::warmup_cosine_annealing},
    {"WarmupStepLR", LrSchedule::warmup_step},
    {"WarmupMultiStepLR", LrSchedule::warmup_multistep},
    {"WarmupExponentialLR", LrSchedule::warmup_exponential},
    {"WarmupPolynomialLR", LrSchedule::warmup_polynomial},
};

double cosine_half(int64_t iter, int64_t period) {
  return 0.5 * (1.0 + std::cos(std::numbers::pi * double(iter) / double(period)));
}

}  // namespace

LrSchedule lr_schedule_from_name(const std::string& libai_name) {
  std::string known;
  for (const auto& [name, schedule] : kNames) {
    if (libai_name == name) return schedule;
    known += known.empty() ? name : std::string(", ") + name;
  }
  LIBAI_THROW(InvalidArgument, "unknown lr scheduler '", libai_name, "' (expected one of ", known,
              ")");
}

const char* lr_schedule_name(LrSchedule schedule) {
  for (const auto& [name, s] : kNames)
    if (s == schedule) return name;
  return "unknown";
}

LrScheduler::LrScheduler(LrSchedulerOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  const char* name = lr_schedule_name(o.kind);
  LIBAI_CHECK(o.warmup_method == "linear" || o.warmup_method == "constant", name,
              ": warmup_method must be 'linear' or 'constant', got '", o.warmup_method, "'");
  LIBAI_CHECK(o.warmup_iter >= 0, name, ": warmup_iter must be >= 0, got ", o.warmup_iter);
  LIBAI_CHECK(o.warmup_factor >= 0 && o.warmup_factor <= 1, name,
              ": warmup_factor must be in [0, 1], got ", o.warmup_factor);
  switch (o.kind) {
    case LrSchedule::warmup_cosine:
    case LrSchedule::warmup_cosine_annealing:
    case LrSchedule::warmup_polynomial:
      LIBAI_CHECK(o.max_iter > 0, name, ": max_iter must be > 0, got ", o.max_iter);
      break;
    case LrSchedule::warmup_step:
      LIBAI_CHECK(o.step_size > 0, name, ": step_size must be > 0, got ", o.step_size);
      LIBAI_CHECK(o.gamma > 0, name, ": gamma must be > 0, got ", o.gamma);
      break;
    case LrSchedule::warmup_multistep:
      for (size_t i = 1; i < o.milestones.size(); ++i)
        LIBAI_CHECK(o.milestones[i] > o.milestones[i - 1], name,
                    ": milestones must be increasing, got ", o.milestones[i - 1], " then ",
                    o.milestones[i], " at index ", i);
      LIBAI_CHECK(o.gamma > 0, name, ": gamma must be > 0, got ", o.gamma);
      break;
    case LrSchedule::warmup_exponential:
      LIBAI_CHECK(o.gamma > 0, name, ": gamma must be > 0, got ", o.gamma);
      break;
  }
}

double LrScheduler::decay(double base_lr, int64_t iter) const {
  const auto& o = options_;
  switch (o.kind) {
    case LrSchedule::warmup_cosine:
      if (iter >= o.max_iter) return base_lr * o.alpha;
      return base_lr * ((1.0 - o.alpha) * cosine_half(iter, o.max_iter) + o.alpha);
    case LrSchedule::warmup_cosine_annealing:
      return o.eta_min + (base_lr - o.eta_min) * cosine_half(iter, o.max_iter);
    case LrSchedule::warmup_step: return base_lr * std::pow(o.gamma, double(iter / o.step_size));
    case LrSchedule::warmup_multistep: {
      const auto passed =
          std::upper_bound(o.milestones.begin(), o.milestones.end(), iter) - o.milestones.begin();
      return base_lr * std::pow(o.gamma, double(passed));
    }
    case LrSchedule::warmup_exponential: return base_lr * std::pow(o.gamma, double(iter));
    case LrSchedule::warmup_polynomial: {
      double t = double(iter), period = double(o.max_iter);
      if (o.cycle) {
        t = std::max(t, 1.0);
        period *= std::ceil(t / period);
      } else {
        t = std::min(t, period);
      }
      return (base_lr - o.end_learning_rate) * std::pow(1.0 - t / period, o.power) +
             o.end_learning_rate;
    }
  }
  LIBAI_ASSERT(false, "unhandled lr schedule");
  return 0;
}

double LrScheduler::lr(double base_lr, int64_t iter) const {
  const auto& o = options_;
  LIBAI_CHECK(iter >= 0, lr_schedule_name(o.kind), ": iteration must be >= 0, got ", iter);
  if (iter >= o.warmup_iter) return decay(base_lr, iter);
  if (o.warmup_method == "constant") return base_lr * o.warmup_factor;
  // Linear: from the warmup factor to the decay schedule's own value at the warmup's end.
  const double end_lr = decay(base_lr, o.warmup_iter);
  if (base_lr == 0) return end_lr * (double(iter) / double(o.warmup_iter));  // no factor to take
  const double end_factor = end_lr / base_lr;
  LIBAI_CHECK(end_factor >= 0 && end_factor <= 1, lr_schedule_name(o.kind),
              ": the linear warmup would end at ", end_lr, ", outside [0, base lr ", base_lr,
              "] (OneFlow's LinearLR needs an end factor in [0, 1])");
  return base_lr * (o.warmup_factor +
                    (end_factor - o.warmup_factor) * (double(iter) / double(o.warmup_iter)));
}

}  // namespace libai::train
