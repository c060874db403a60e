// train.dist.stage_precision of a config job (Note [Precision per pipeline stage] in
// schedule/precision.h): each slot priced at its precision by hand, `auto` choosing the small
// node's 4 bits and sending the choice on, and bad input as one error each.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "actors/jobs/config_job.h"
#include "models/convert.h"
#include "tests/actors/model_job_fixture.h"
#include "tests/common/error_of.h"

namespace libai::actors {
namespace {

using testing::device;
using testing::ModelJobPlan;
using testing::synthetic_config;

const auto error_of = libai::testing::error_message_of;

// train.dist.stage_precision (Note [Precision per pipeline stage]): slot 1 in q4 holds its
// layers and the head at q4's bytes, slot 0 in bf16 at half of f32's; each device's layer
// time is the one it timed at its slot's precision; the plan prints each stage's precision.
TEST_F(ModelJobPlan, StagePrecisionPricesEachSlotAtItsOwn) {
  config::Config mixed = generate_config("uniform");
  mixed.apply_override("+train.dist.stage_precision=[bf16, \"q4:32\"]");
  ConfigJob job(mixed, 2);
  const JobShape shape = job.shape();
  ASSERT_EQ(shape.precisions.size(), 2u);
  EXPECT_EQ(shape.slot_precision, (std::vector<int>{0, 1}));
  wire::DeviceProfile a = device("node0:cpu:0", 1, 1000), b = device("node1:cpu:0", 1, 1000);
  for (auto* d : {&a, &b}) d->timings = {{"bf16", 0.002, 0.0005}, {"q4:32", 0.001, 0.0002}};
  const schedule::PlanRequest r = plan_request(shape, {a, b});
  ASSERT_EQ(r.slot_weight_bytes.size(), 2u);
  EXPECT_DOUBLE_EQ(r.slot_weight_bytes[0][2], 12704 * 2.0);
  EXPECT_DOUBLE_EQ(r.slot_weight_bytes[1][2], 12704 * (0.5 + 2.0 / 32));
  // The head: the tied table (37 x 32) and the final norm (2 x 32), counted at the same rate.
  const double head = (37 * 32 + 64) * 4.0;
  EXPECT_DOUBLE_EQ(r.slot_head_bytes[1], head * (0.5 + 2.0 / 32) / 4);
  EXPECT_DOUBLE_EQ(r.slot_head_bytes[0], head / 2);
  // Calibrated by each device's timing at its slot's precision: layer 1 is what it timed.
  EXPECT_NEAR(r.layer_time[0][1], 0.002, 1e-12);
  EXPECT_NEAR(r.layer_time[1][1], 0.001, 1e-12);
  EXPECT_NEAR(r.layer_decode_time[1][1], 0.0002, 1e-12);
  const schedule::Plan plan = compile_job_plan(shape, {a, b});
  EXPECT_DOUBLE_EQ(plan.stages[1].weight_bytes, 2 * 12704 * (0.5 + 2.0 / 32) +
                                                   head * (0.5 + 2.0 / 32) / 4);
  std::ostringstream text;
  print_job_plan(text, shape, plan, {a, b});
  EXPECT_NE(text.str().find("weights per stage"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("weights bf16"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("weights q4:32"), std::string::npos) << text.str();
}

// auto: the small node takes the 4-bit layers. Node 1 cannot hold one f32 layer with its KV
// cache, but holds the head and two q4 layers: the plan gives up the fewest layer-steps.
TEST_F(ModelJobPlan, StagePrecisionAutoGivesTheSmallNodeFourBits) {
  config::Config config = generate_config("measured");
  config.apply_override("+train.dist.stage_precision=auto");
  config.apply_override("+train.dist.stage_precision_choices=[f32, q4]");
  ConfigJob job(config, 2);
  const double f32_layer = 4.0 * 12704 + 2 * 4.0 * 2 * 32 * 3 * 10;
  wire::DeviceProfile big = device("node0:cpu:0", 1, 1000),
                      small = device("node1:cpu:0", 1, 1000, 0.9 * f32_layer);
  wire::Assignment a;
  a.devices = {big, small};
  job.plan(a);
  const JobShape shape = job.shape();
  EXPECT_EQ(shape.slot_precision, (std::vector<int>{0, 1}));
  EXPECT_NE(a.config_yaml.find("stage_precision"), std::string::npos);
  // The other nodes read the choice as a list.
  ConfigJob other(config::Config::parse(a.config_yaml, "node 0's config"), 2);
  ASSERT_EQ(other.shape().precisions.size(), 2u);
  EXPECT_EQ(ops::weight_precision_name(other.shape().precisions[size_t(other.shape().slot_precision[1])]),
            "q4:32");
  check_job_plan(job.chosen_plan(), a.devices, 1);
  // Too small even for q4: one error, naming what the least precise plan needs.
  ConfigJob tiny(config, 2);
  wire::Assignment t;
  t.devices = {big, device("node1:cpu:0", 1, 1000, 1000)};
  const std::string none_fits = error_of([&] { tiny.plan(t); });
  EXPECT_NE(none_fits.find("no choice of precisions per stage (of f32, q4:32) fits"),
            std::string::npos) << none_fits;
}

TEST_F(ModelJobPlan, StagePrecisionBadInputIsOneError) {
  auto error = [&](const std::vector<std::string>& overrides) {
    config::Config c = generate_config("uniform");
    for (const auto& o : overrides) c.apply_override(o);
    return error_of([&] { ConfigJob job(c, 2); });
  };
  EXPECT_NE(error({"+train.dist.stage_precision=[f32]"}).find("1 precisions for "
                                                               "train.dist.pipeline_parallel_size 2"),
            std::string::npos);
  EXPECT_NE(error({"+train.dist.stage_precision=[f32, q5]"}).find("'q5' is not a precision"),
            std::string::npos);
  EXPECT_NE(error({"+train.dist.stage_precision=[f32, none]"}).find("'none' is not a precision"),
            std::string::npos);
  EXPECT_NE(error({"+train.dist.stage_precision=[f32, q4]", "+model.quantize=int8"})
                .find("set model.quantize or train.dist.stage_precision, not both"),
            std::string::npos);
  EXPECT_NE(error({"+train.dist.stage_precision_choices=[f32, q4]"})
                .find("read with train.dist.stage_precision: auto only"),
            std::string::npos);
  EXPECT_NE(error({"+train.dist.stage_precision=auto", "+train.dist.stage_precision_choices=[q4, q4]"})
                .find("listed twice"),
            std::string::npos);
  // A quantized checkpoint runs as stored.
  const std::filesystem::path stored = quantized_copy({ops::Quantization::q4});
  const config::Config c = folder_config(stored, "pipeline_parallel_size: 2, stage_precision: [f32, q4]");
  EXPECT_NE(error_of([&] { ConfigJob job(c, 2); }).find("is a quantized checkpoint"),
            std::string::npos);
  std::filesystem::remove_all(stored);
  // Synthetic stages hold no weights.
  config::Config synthetic = synthetic_config(4, 2, "uniform", 2, 1);
  synthetic.apply_override("+train.dist.stage_precision=[f32, q4]");
  EXPECT_NE(error_of([&] { ConfigJob job(synthetic, 2); }).find("synthetic"), std::string::npos);
}

}  // namespace
}  // namespace libai::actors
