// LiBai's schedules against torch LambdaLR schedulers built from LiBai's and OneFlow's
// formulas (tools/make_optimizer_fixtures.py), iteration by iteration, for two base lrs.
#include "train/lr_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace libai::train {
namespace {

nlohmann::json fixtures() {
  std::ifstream in(std::string(LIBAI_SOURCE_DIR) + "/tests/data/training/lr_schedules.json");
  return nlohmann::json::parse(in);
}

LrSchedulerOptions options_from(const nlohmann::json& o) {
  return {.kind = lr_schedule_from_name(o.at("kind").get<std::string>()),
          .max_iter = o.at("max_iter"),
          .warmup_iter = o.at("warmup_iter"),
          .warmup_factor = o.at("warmup_factor"),
          .warmup_method = o.at("warmup_method").get<std::string>(),
          .alpha = o.at("alpha"),
          .eta_min = o.at("eta_min"),
          .step_size = o.at("step_size"),
          .gamma = o.at("gamma"),
          .milestones = o.at("milestones").get<std::vector<int64_t>>(),
          .power = o.at("power"),
          .end_learning_rate = o.at("end_learning_rate"),
          .cycle = o.at("cycle")};
}

TEST(LrScheduler, EveryScheduleMatchesTorch) {
  const auto data = fixtures();
  const int64_t iters = data.at("iters");
  ASSERT_EQ(data.at("cases").size(), 14u);
  std::set<std::string> kinds;
  for (const auto& c : data.at("cases")) {
    const LrScheduler scheduler(options_from(c.at("options")));
    const std::string what = c.at("options").dump();
    kinds.insert(c.at("options").at("kind"));
    for (size_t g = 0; g < c.at("base_lrs").size(); ++g) {
      const double base = c.at("base_lrs")[g];
      for (int64_t i = 0; i < iters; ++i) {
        const double want = c.at("lrs")[g][i];
        ASSERT_NEAR(scheduler.lr(base, i), want, 1e-12 * std::abs(want) + 1e-18)
            << what << " base lr " << base << " iteration " << i;
      }
    }
  }
  EXPECT_EQ(kinds.size(), 6u);  // every schedule is covered
}

// Hand-checked values pin the reading of the formulas: the linear warmup ends at the decay's
// own value at warmup_iter, and the decay does not restart after the warmup.
TEST(LrScheduler, WarmupEndsOnTheDecayCurve) {
  const LrScheduler step({.kind = LrSchedule::warmup_step,
                          .max_iter = 100,
                          .warmup_iter = 4,
                          .warmup_factor = 0.5,
                          .step_size = 2,
                          .gamma = 0.5});
  EXPECT_DOUBLE_EQ(step.lr(1.0, 0), 0.5);
  EXPECT_DOUBLE_EQ(step.lr(1.0, 2), 0.5 + (0.25 - 0.5) * 0.5);  // towards gamma^(4/2) = 0.25
  EXPECT_DOUBLE_EQ(step.lr(1.0, 4), 0.25);
  EXPECT_DOUBLE_EQ(step.lr(1.0, 6), 0.125);
  const LrScheduler constant({.kind = LrSchedule::warmup_step,
                              .max_iter = 100,
                              .warmup_iter = 4,
                              .warmup_factor = 0.5,
                              .warmup_method = "constant",
                              .step_size = 2,
                              .gamma = 0.5});
  EXPECT_DOUBLE_EQ(constant.lr(2.0, 3), 1.0);
  EXPECT_DOUBLE_EQ(constant.lr(2.0, 4), 0.5);
}

TEST(LrScheduler, NamesAndValidation) {
  EXPECT_EQ(lr_schedule_from_name("WarmupPolynomialLR"), LrSchedule::warmup_polynomial);
  EXPECT_STREQ(lr_schedule_name(LrSchedule::warmup_multistep), "WarmupMultiStepLR");
  try {
    lr_schedule_from_name("CosineLR");
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("WarmupCosineAnnealingLR"), std::string::npos) << e.what();
  }
  EXPECT_THROW(LrScheduler({.kind = LrSchedule::warmup_cosine, .max_iter = 0}), InvalidArgument);
  EXPECT_THROW(LrScheduler({.kind = LrSchedule::warmup_step, .step_size = 0}), InvalidArgument);
  EXPECT_THROW(LrScheduler({.kind = LrSchedule::warmup_multistep, .milestones = {5, 5}}),
               InvalidArgument);
  EXPECT_THROW(LrScheduler({.kind = LrSchedule::warmup_exponential, .gamma = 0}), InvalidArgument);
  EXPECT_THROW(
      LrScheduler({.kind = LrSchedule::warmup_cosine, .max_iter = 10, .warmup_method = "cosine"}),
      InvalidArgument);
  EXPECT_THROW(LrScheduler({.kind = LrSchedule::warmup_cosine, .max_iter = 10, .warmup_factor = 2}),
               InvalidArgument);
  const LrScheduler ok({.kind = LrSchedule::warmup_cosine, .max_iter = 10});
  EXPECT_THROW(ok.lr(1.0, -1), InvalidArgument);
}

}  // namespace
}  // namespace libai::train
