// Training plans under each pipeline schedule (PlanRequest::schedule, num_chunks): the program
// compiled, the activations each stage stashes by that program, and interleaved plans' virtual
// stages.
#include <gtest/gtest.h>

#include <functional>

#include "runtime/error.h"
#include "schedule/plan.h"
#include "tests/schedule/reference_simulator.h"
#include "tests/schedule/error_of.h"

namespace libai::schedule {
namespace {

using testing::error_of;

// pp devices of one speed, `layers` layers of 1 s forward, 10 bytes of weights and 1 byte of
// activations per micro-batch each.
PlanRequest even(int pp, int layers, int m, PipelineSchedule schedule, int chunks = 1) {
  PlanRequest r;
  r.pp = pp;
  r.layer_time.assign(size_t(pp), std::vector<double>(size_t(layers), 1.0));
  r.weight_bytes.assign(size_t(layers), 10.0);
  r.activation_bytes.assign(size_t(layers), 1.0);
  r.num_micro_batches = m;
  r.schedule = schedule;
  r.num_chunks = chunks;
  return r;
}

TEST(PlanSchedule, NamesRoundTripAndBadNamesNameTheKey) {
  for (PipelineSchedule s :
       {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved})
    EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  EXPECT_STREQ(schedule_name(PipelineSchedule::one_f_one_b), "1f1b");
  const std::string e = error_of([] { parse_schedule("zb"); });
  EXPECT_NE(e.find("train.dist.pipeline_schedule is 'zb'; expected one of gpipe, 1f1b, "
                   "interleaved"),
            std::string::npos)
      << e;
}

// GPipe stashes all m micro-batches on every stage, 1F1B p - s: the memory of each stage is
// its layers' activations times that, and the programs are the schedule's.
TEST(PlanSchedule, StageMemoryFollowsTheSchedulesStash) {
  const int pp = 4, layers = 8, m = 8;
  const Plan one = compile_plan(even(pp, layers, m, PipelineSchedule::one_f_one_b));
  const Plan all = compile_plan(even(pp, layers, m, PipelineSchedule::gpipe));
  EXPECT_EQ(one.program, one_f_one_b(pp, m));
  EXPECT_EQ(all.program, gpipe(pp, m));
  EXPECT_EQ(one.schedule, PipelineSchedule::one_f_one_b);
  for (int s = 0; s < pp; ++s) {
    EXPECT_DOUBLE_EQ(one.stages[size_t(s)].activation_bytes, 2.0 * (pp - s));
    EXPECT_DOUBLE_EQ(all.stages[size_t(s)].activation_bytes, 2.0 * m);
    EXPECT_DOUBLE_EQ(one.rank_memory[size_t(s)].activation_bytes, 2.0 * (pp - s));
    EXPECT_DOUBLE_EQ(one.rank_memory[size_t(s)].weight_bytes, 20.0);
    EXPECT_DOUBLE_EQ(one.rank_memory[size_t(s)].total(), one.stages[size_t(s)].memory());
  }
  EXPECT_EQ(all.quota, buffer_quota(gpipe(pp, m)));
  // Equal stages: both take (m + p - 1)(f + b) with f = 2 layers, b = 2 f.
  EXPECT_DOUBLE_EQ(one.timeline.step_time, (m + pp - 1) * 6.0);
  EXPECT_DOUBLE_EQ(all.timeline.step_time, (m + pp - 1) * 6.0);
  EXPECT_NO_THROW(validate(one));
  EXPECT_NO_THROW(validate(all));
}

// The balanced partition weighs the schedule's stash: 4 layers, 2 devices of 4 bytes, 4
// micro-batches. Under 1F1B the even split needs 2 x 2 and 2 x 1 bytes and fits; under GPipe
// every stage stashes 4 micro-batches, so any stage of one layer or more needs 4 bytes per layer:
// no split fits.
TEST(PlanSchedule, BalancedSplitWeighsTheSchedulesMemory) {
  PlanRequest r = even(2, 4, 4, PipelineSchedule::one_f_one_b);
  r.weight_bytes.assign(4, 0.0);
  r.memory_cap = {4, 4};
  r.balance = Balance::balanced;
  const Plan plan = compile_plan(r);
  EXPECT_EQ(plan.stage_of, (StageAssignment{0, 0, 1, 1}));
  EXPECT_NO_THROW(validate(plan));
  r.schedule = PipelineSchedule::gpipe;
  EXPECT_NE(error_of([&] { compile_plan(r); }), "no error");
  // The uniform GPipe plan compiles and validate() names what does not fit.
  r.balance = Balance::uniform;
  const std::string e = error_of([&] { validate(compile_plan(r)); });
  EXPECT_NE(e.find("plan: stage 0 (layers 0-1) does not fit device 0: it needs 8 bytes"),
            std::string::npos)
      << e;
}

// Interleaved: pp x v virtual stages of contiguous layers, chunk c of rank r being virtual stage
// c pp + r; each rank's memory holds its chunks' weights and the program's peak stash.
TEST(PlanSchedule, InterleavedVirtualStages) {
  const int pp = 2, v = 2, layers = 8, m = 4;
  PlanRequest r = even(pp, layers, m, PipelineSchedule::interleaved, v);
  r.embedding = {.time = {0.5, 0.5}, .bytes = 100};
  r.head = {.time = {0.25, 0.25}, .bytes = 50};
  const Plan plan = compile_plan(r);
  EXPECT_EQ(plan.num_chunks, 2);
  EXPECT_EQ(plan.stage_of, (StageAssignment{0, 0, 1, 1, 2, 2, 3, 3}));
  ASSERT_EQ(plan.stages.size(), 4u);
  EXPECT_EQ(plan.program, interleaved_one_f_one_b(pp, m, v));
  EXPECT_EQ(plan.stages[2].devices, plan.stages[0].devices);  // rank 0's chunk 1
  EXPECT_EQ(plan.stages[3].devices, plan.stages[1].devices);
  EXPECT_DOUBLE_EQ(plan.stages[0].forward_time, 0.5 + 2);  // embedding on virtual stage 0
  EXPECT_DOUBLE_EQ(plan.stages[1].forward_time, 2);
  EXPECT_DOUBLE_EQ(plan.stages[3].forward_time, 2 + 0.25);  // head on the last
  EXPECT_DOUBLE_EQ(plan.rank_memory[0].weight_bytes, 100 + 40);
  EXPECT_DOUBLE_EQ(plan.rank_memory[1].weight_bytes, 40 + 50);
  // Every chunk stashes 2 bytes per micro-batch: the rank's peak in chunks times 2.
  const std::vector<int> stash = peak_stashed_activations(plan.program);
  for (int k = 0; k < pp; ++k)
    EXPECT_DOUBLE_EQ(plan.rank_memory[size_t(k)].activation_bytes, 2.0 * stash[size_t(k)]);
  EXPECT_EQ(plan.quota, buffer_quota(plan.program));
  EXPECT_EQ(plan.quota.size(), 4u);
  // The timeline against the reference replay of the same costs per virtual stage.
  StageCosts costs{.forward = {2.5, 2, 2, 2.25}, .backward = {5, 4, 4, 4.5}};
  const auto expected = testing::reference_simulate(plan.program, costs, plan.quota);
  ASSERT_FALSE(expected.deadlock);
  EXPECT_DOUBLE_EQ(plan.timeline.step_time, expected.step_time);
  EXPECT_EQ(plan.timeline.busy.size(), size_t(pp));
  EXPECT_NO_THROW(validate(plan));
  // Without the extras: Megatron's (m v + p - 1)(f + b) / v with f = 4 layers per rank.
  const Plan bare = compile_plan(even(pp, layers, m, PipelineSchedule::interleaved, v));
  EXPECT_DOUBLE_EQ(bare.timeline.step_time, (m * v + pp - 1) * 12.0 / v);
  // A rank's memory too large is named with its chunks' layers.
  r.memory_cap = {145, 1000};  // rank 0 needs 140 + 2 x 5
  const std::string e = error_of([&] { validate(compile_plan(r)); });
  EXPECT_NE(e.find("plan: pipeline rank 0 (layers 0-1, 4-5) does not fit device 0"),
            std::string::npos)
      << e;
}

TEST(PlanSchedule, BadInterleavedRequestsAreNamed) {
  std::string e = error_of([] { compile_plan(even(4, 16, 6, PipelineSchedule::interleaved, 2)); });
  EXPECT_NE(e.find("6 micro-batches is not a multiple of the 4 pipeline stages"), std::string::npos)
      << e;
  e = error_of([] { compile_plan(even(4, 16, 8, PipelineSchedule::one_f_one_b, 2)); });
  EXPECT_NE(e.find("num_chunks (train.dist.virtual_pipeline_size) is 2 but only the interleaved "
                   "training schedule runs several chunks per pipeline rank (the 1f1b schedule "
                   "runs one)"),
            std::string::npos)
      << e;
  e = error_of([] { compile_plan(even(4, 6, 8, PipelineSchedule::interleaved, 2)); });
  EXPECT_NE(e.find("cuts the 6 layers into pipeline_parallel_size x virtual_pipeline_size = 4 x 2 "
                   "= 8 virtual stages"),
            std::string::npos)
      << e;
  PlanRequest balanced = even(2, 8, 4, PipelineSchedule::interleaved, 2);
  balanced.balance = Balance::balanced;
  e = error_of([&] { compile_plan(balanced); });
  EXPECT_NE(e.find("balance balanced with the interleaved schedule (2 chunks per rank) is not "
                   "implemented yet"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of([] { compile_plan(even(2, 8, 4, PipelineSchedule::interleaved, 0)); }),
            "no error");
  // One chunk is 1F1B.
  EXPECT_EQ(compile_plan(even(4, 8, 6, PipelineSchedule::interleaved, 1)).program,
            one_f_one_b(4, 6));
}

}  // namespace
}  // namespace libai::schedule
