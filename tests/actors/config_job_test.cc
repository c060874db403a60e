// The plan of a config job (plan/run_plan.h, ConfigJob::plan): the request compile_plan gets
// from the job and the devices' profiles, checked against hand computations; the split, the
// order of the pipeline slots and the layout that follows from them; a plan that does not fit,
// named by the device's profile.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "actors/jobs/config_job.h"
#include "actors/jobs/prediction.h"
#include "actors/jobs/model_jobs.h"
#include "actors/synthetic.h"
#include "models/convert.h"
#include "tests/actors/model_job_fixture.h"
#include "tests/models/random_models.h"

namespace libai::actors {
namespace {

using testing::device;
using testing::families;
using testing::ModelJobPlan;
using testing::save_random_model;
using testing::synthetic_config;

std::vector<int> split(const wire::Assignment& a) { return {a.stage_of.begin(), a.stage_of.end()}; }
std::vector<int> slots(const wire::Assignment& a) {
  return {a.device_of_stage.begin(), a.device_of_stage.end()};
}

// Layers cost 1 ms on the device of 100 GFLOP/s and 4 ms on the one of 25 (the measured
// slow-down). The best split of 10 layers gives the fast device 8 (8 ms against 2 x 4 ms; the
// reversed order ties, and ties keep the given order); 4 micro-batches through two stages of
// 8 ms take 8 + 8 + 3 x 8 = 40 ms.
TEST(ConfigJobPlan, SyntheticSplitAndPredictionByHand) {
  ConfigJob job(synthetic_config(10, 2, "measured", 4, 1), /*nodes=*/2);
  const std::vector<wire::DeviceProfile> devices = {device("node0:cpu:0", 100),
                                                    device("node1:cpu:0", 25)};
  const schedule::PlanRequest request = plan_request(job.shape(), devices);
  EXPECT_EQ(request.workload, schedule::Workload::inference);
  EXPECT_EQ(request.layer_time[0], std::vector<double>(10, 0.001));
  EXPECT_EQ(request.layer_time[1], std::vector<double>(10, 0.004));

  wire::Assignment a;
  a.devices = devices;
  job.plan(a);
  EXPECT_EQ(split(a), (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(slots(a), (std::vector<int>{0, 1}));
  EXPECT_NEAR(predict_job(job, a).step_time, 0.040, 1e-12);

  // Uniform: 5 + 5 layers, stages of 5 and 20 ms: 5 + 20 + 3 x 20 = 85 ms.
  ConfigJob uniform(synthetic_config(10, 2, "uniform", 4, 1), 2);
  uniform.plan(a);
  EXPECT_EQ(split(a), (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_NEAR(predict_job(uniform, a).step_time, 0.085, 1e-12);
}

// job.steps > 1 decodes: 2 groups x 3 steps through two stages of 2 ms: (T G + p - 1) f =
// (6 + 1) x 2 = 14 ms.
TEST(ConfigJobPlan, SyntheticStepsDecode) {
  ConfigJob job(synthetic_config(4, 2, "uniform", 2, 3), 2);
  wire::Assignment a;
  a.devices = {device("node0:cpu:0", 50), device("node1:cpu:0", 50)};
  job.plan(a);
  EXPECT_EQ(job.chosen_plan().workload, schedule::Workload::decode);
  EXPECT_NEAR(predict_job(job, a).step_time, 0.014, 1e-12);
  std::ostringstream out;
  job.print_plan(out, a);
  EXPECT_NE(out.str().find("2 groups x 3 steps (decoding)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("stage 1: layers 2-3 (2), node1:cpu:0 (50 GFLOP/s, 10 GB/s), 2.000 ms "
                           "per step, 2 input slots"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("predicted job time 14.000 ms"), std::string::npos) << out.str();
}

// The random GPT-2 (hidden 32, inner 128, 4 heads) by hand: a layer holds 4 x 32 x 32 + 4 x 32
// (attention) + 2 x 32 x 128 + 128 + 32 (MLP) + 4 x 32 (norms) = 12704 f32 parameters; a group's
// prefill runs 3 rows x 4 tokens = 12 tokens over 4 keys: 2 x 12 x (4 x 32^2 + 2 x 32 x 128) +
// 4 x 12 x 4 x 32 = 301056 flops; a decoding step 3 tokens over the mean context 4 + 6/2 = 7:
// 2 x 3 x 12288 + 4 x 3 x 7 x 32 = 76416 flops, reading the weights and 3 x 7 tokens of keys and
// values (2 x 32 f32 each); a group's KV cache holds 3 x (4 + 6) tokens. At 1 GFLOP/s and
// 1000 GB/s every layer is compute-bound.
TEST_F(ModelJobPlan, RequestFromTheModelsCostsByHand) {
  ConfigJob job(generate_config("uniform"), 2);
  const JobShape shape = job.shape();
  EXPECT_EQ(shape.rows, 3);
  EXPECT_EQ(shape.input_tokens, 4);
  const schedule::PlanRequest r =
      plan_request(shape, {device("node0:cpu:0", 1, 1000), device("node1:cpu:0", 1, 1000)});
  EXPECT_EQ(r.workload, schedule::Workload::decode);
  EXPECT_EQ(r.num_micro_batches, 2);
  EXPECT_EQ(r.num_steps, 6);
  ASSERT_EQ(r.weight_bytes.size(), 4u);
  EXPECT_EQ(r.weight_bytes[2], 4.0 * 12704);
  EXPECT_EQ(r.kv_cache_bytes[2], 4.0 * 2 * 32 * 3 * 10);
  EXPECT_NEAR(r.layer_time[1][2], 301056e-9, 1e-15);
  EXPECT_NEAR(r.layer_decode_time[1][2], 76416e-9, 1e-15);
  EXPECT_DOUBLE_EQ(r.memory_cap[0], 1e9);
}

// model.quantize: the layers' weights at the quantized bytes (q4:32: half a byte and an f16
// scale per 32 values), the KV cache as it was; a folder written by convert --quantize is priced
// at its stored kind without the key.
TEST_F(ModelJobPlan, QuantizedWeightsArePricedAtTheirBytes) {
  const std::vector<wire::DeviceProfile> devices = {device("node0:cpu:0", 1, 1000),
                                                    device("node1:cpu:0", 1, 1000)};
  config::Config q4 = generate_config("uniform");
  q4.apply_override("+model.quantize=q4");
  ConfigJob job(q4, 2);
  EXPECT_EQ(job.shape().quantize, (ops::QuantSpec{ops::Quantization::q4}));
  const schedule::PlanRequest r = plan_request(job.shape(), devices);
  EXPECT_DOUBLE_EQ(r.weight_bytes[2], 12704 * (0.5 + 2.0 / 32));
  EXPECT_EQ(r.kv_cache_bytes[2], 4.0 * 2 * 32 * 3 * 10);
  const std::filesystem::path stored = quantized_copy({ops::Quantization::int8});
  ConfigJob from_folder(folder_config(stored), 2);
  EXPECT_EQ(from_folder.shape().quantize, (ops::QuantSpec{ops::Quantization::int8}));
  EXPECT_DOUBLE_EQ(plan_request(from_folder.shape(), devices).weight_bytes[2], 12704.0);
  std::filesystem::remove_all(stored);
}

// Note [Calibrated layer costs]: a device that timed layer 1 at 3x its roofline (forward) and
// 5x (decoding step) gets every layer, the embedding and the head scaled so; a device without
// timings leaves every device on the roofline.
TEST_F(ModelJobPlan, TimedLayersScaleEachDevicesRooflines) {
  ConfigJob job(generate_config("uniform"), 2);
  wire::DeviceProfile fast = device("node0:cpu:0", 1, 1000), slow = device("node1:cpu:0", 1, 1000);
  const schedule::PlanRequest roof = plan_request(job.shape(), {fast, slow});
  fast.layer_seconds = 301056e-9;  // its roofline: 1x
  fast.layer_step_seconds = 76416e-9;
  slow.layer_seconds = 3 * 301056e-9;
  slow.layer_step_seconds = 5 * 76416e-9;
  const schedule::PlanRequest r = plan_request(job.shape(), {fast, slow});
  for (int l = 0; l < 4; ++l) {
    EXPECT_NEAR(r.layer_time[0][size_t(l)], roof.layer_time[0][size_t(l)], 1e-15);
    EXPECT_NEAR(r.layer_time[1][size_t(l)], 3 * roof.layer_time[1][size_t(l)], 1e-15);
    EXPECT_NEAR(r.layer_decode_time[1][size_t(l)], 5 * roof.layer_decode_time[1][size_t(l)], 1e-15);
  }
  EXPECT_NEAR(r.head.time[1], 3 * roof.head.time[1], 1e-15);
  EXPECT_NEAR(r.head.decode_time[1], 5 * roof.head.decode_time[1], 1e-15);
  EXPECT_NEAR(r.embedding.decode_time[1], 5 * roof.embedding.decode_time[1], 1e-15);

  fast.layer_step_seconds = 0;  // a generate job needs both timings on every device
  const schedule::PlanRequest partial = plan_request(job.shape(), {fast, slow});
  EXPECT_EQ(partial.layer_time, roof.layer_time);
}

// The layer a model job times at join: the real layer 1 of the model, at the job's shapes; a
// decoding step (one token per row) is far cheaper than a prefill of 128 tokens per row, and a
// model it cannot time says so. (The emulated slow-down it applies is EmulatedSpeed's,
// checked with synthetic layers above; model timings are too noisy on a loaded host to check
// a factor here.)
TEST_F(ModelJobPlan, AModelLayerIsTimedOnTheDevice) {
  const auto t = time_model_layer(model_, Device::cpu(0), 1.0, /*rows=*/8, /*tokens=*/128,
                                  /*context=*/128);
  ASSERT_TRUE(t.has_value());
  EXPECT_GT(t->forward_seconds, 0);
  EXPECT_GT(t->step_seconds, 0);
  EXPECT_LT(t->step_seconds, t->forward_seconds);
  for (auto f : families())
    if (f.name == "gpt2") {
      f.config["n_layer"] = 2;  // two layers: none without the embedding or the head
      const auto two = save_random_model(f, "config_job_2l_" + std::to_string(::getpid()));
      EXPECT_EQ(time_model_layer(two, Device::cpu(0), 1.0, 1, 4, 4), std::nullopt);
      std::filesystem::remove_all(two);
    }
}

// Memory the plan's way: what stage `s` of one layer needs (its layer, both groups' KV caches,
// and the embedding on the first stage or the head on the last).
double one_layer_stage_bytes(const schedule::PlanRequest& r, bool first) {
  return r.weight_bytes[0] + r.num_micro_batches * r.kv_cache_bytes[0] +
         (first ? r.embedding.bytes : r.head.bytes);
}

// Devices that timed the job's layer (synthetic jobs do when they join) are planned with those
// times, whatever their rates say; without timings on every device, the rates decide.
TEST(ConfigJobPlan, SyntheticLayersCostWhatTheDevicesTimed) {
  ConfigJob job(synthetic_config(10, 2, "measured", 4, 1), /*nodes=*/2);
  wire::DeviceProfile fast = device("node0:cpu:0", 100), slow = device("node1:cpu:0", 100);
  fast.layer_seconds = 0.0011;
  slow.layer_seconds = 0.0033;
  const schedule::PlanRequest timed = plan_request(job.shape(), {fast, slow});
  EXPECT_EQ(timed.layer_time[0], std::vector<double>(10, 0.0011));
  EXPECT_EQ(timed.layer_time[1], std::vector<double>(10, 0.0033));
  wire::Assignment a;
  a.devices = {fast, slow};
  job.plan(a);
  // The fast device takes 8 layers (8.8 ms against 6.6 ms; with 7, the slow one has 9.9 ms).
  EXPECT_EQ(split(a), (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1}));

  slow.layer_seconds = 0;  // one device without a timing: rates for all
  const schedule::PlanRequest rates = plan_request(job.shape(), {fast, slow});
  EXPECT_EQ(rates.layer_time[1], std::vector<double>(10, 0.001));

  slow.layer_seconds = std::nan("");
  EXPECT_THROW(plan_request(job.shape(), {fast, slow}), Error);
}

// A synthetic training job is planned as training (Note [Synthetic training jobs]): 8 layers
// timed at 1 ms on the fast device and 4 ms on the slow one, backward 2x forward. The
// partition balances forward + backward: 7 layers on the fast device (21 ms against 12 ms;
// with 6, the slow one has 2 x 12 = 24 ms). One 1F1B step of 4 micro-batches through stages
// of (7, 14) and (4, 8) ms, by hand: stage 0 F0 0-7, F1 7-14; stage 1 F0 7-11, B0 11-19;
// stage 0 B0 19-33, F2 33-40; stage 1 F1 19-23, B1 23-31; stage 0 B1 40-54, F3 54-61; stage 1
// F2 40-44, B2 44-52, F3 61-65, B3 65-73; stage 0 B2 61-75, B3 75-89: 89 ms.
TEST(ConfigJobPlan, SyntheticTrainingIsPlannedAsTraining) {
  const auto cfg = config::Config::parse(
      "train:\n  dist: {pipeline_parallel_size: 2, pipeline_num_layers: 8, balance: measured}\n"
      "job: {_target_: synthetic_train, layer_seconds: 0.001, backward_factor: 2, "
      "micro_batches: 4, schedule: 1f1b}\n");
  ConfigJob job(cfg, /*nodes=*/2);
  wire::DeviceProfile fast = device("node0:cpu:0", 100), slow = device("node1:cpu:0", 25);
  fast.layer_seconds = 0.001;
  slow.layer_seconds = 0.004;
  const schedule::PlanRequest request = plan_request(job.shape(), {fast, slow});
  EXPECT_EQ(request.workload, schedule::Workload::train);
  EXPECT_EQ(request.schedule, schedule::PipelineSchedule::one_f_one_b);
  EXPECT_EQ(request.backward_factor, 2.0);
  EXPECT_EQ(request.num_micro_batches, 4);
  wire::Assignment a;
  a.devices = {fast, slow};
  job.plan(a);
  EXPECT_EQ(split(a), (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(slots(a), (std::vector<int>{0, 1}));
  EXPECT_NEAR(predict_job(job, a).step_time, 0.089, 1e-12);
  std::ostringstream text;
  job.print_plan(text, a);
  EXPECT_NE(text.str().find("(training, 1f1b, backward 2x forward)"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("predicted step time 89.000 ms"), std::string::npos) << text.str();

  // Interleaved over 2 chunks: 4 virtual stages of 2 layers; the layout places the 2 stages.
  const auto interleaved = config::Config::parse(
      "train:\n  dist: {pipeline_parallel_size: 2, pipeline_num_layers: 8}\n"
      "job: {_target_: synthetic_train, layer_seconds: 0.001, micro_batches: 4, "
      "schedule: interleaved, chunks: 2}\n");
  ConfigJob chunked(interleaved, 2);
  chunked.plan(a);
  EXPECT_EQ(split(a), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(slots(a), (std::vector<int>{0, 1}));
  EXPECT_EQ(chunked.layout(a).slots.size(), 2u);
}

// Emulated slow-down of a synthetic layer, as a stage runs it: 2 ms at slow-down 3 takes 6 ms
// (wide bounds: the host may be loaded; the point is the factor, not the timing).
TEST(ConfigJobPlan, ASyntheticLayerIsTimedAtTheDeviceSlowdown) {
  const double one = time_synthetic_layer(0.002, 1.0, 5);
  const double three = time_synthetic_layer(0.002, 3.0, 5);
  // Never under the work asked for; over it only by what a loaded host adds to the fastest of
  // 5 (a few ms at a load of 12 on 2 cores: 12.7 ms for the 6 ms one was seen with 3).
  EXPECT_GE(one, 0.002);
  EXPECT_LT(one, 0.006);
  EXPECT_GE(three, 0.006);
  EXPECT_LT(three, 0.012);
}

// Node 0's device can hold one layer with the head (the last stage) but not one layer with the
// embedding (GPT-2's embedding also holds the positions): the balanced plan runs stage 0 on
// node 1 and stage 1 on node 0, and the layout follows.
TEST_F(ModelJobPlan, TheOrderSearchMovesStageZeroToAnotherNode) {
  ConfigJob job(generate_config("measured"), 2);
  const schedule::PlanRequest r =
      plan_request(job.shape(), {device("node0:cpu:0", 50), device("node1:cpu:0", 50)});
  const double last = one_layer_stage_bytes(r, false), first = one_layer_stage_bytes(r, true);
  ASSERT_LT(last, first);
  wire::Assignment a;
  a.devices = {device("node0:cpu:0", 50, 10, (first + last) / 2), device("node1:cpu:0", 50)};
  job.plan(a);
  EXPECT_EQ(split(a), (std::vector<int>{0, 0, 0, 1}));
  EXPECT_EQ(slots(a), (std::vector<int>{1, 0}));
  const PipelineLayout layout = job.layout(a);
  EXPECT_EQ(layout.slot(0, 0, 0).node, 1);
  EXPECT_EQ(layout.slot(0, 1, 0).node, 0);
  std::ostringstream out;
  job.print_plan(out, a);
  EXPECT_NE(out.str().find("stage 0: layers 0-2 (3), node1:cpu:0"), std::string::npos) << out.str();

  // Uniform keeps the order: stage 0 (two layers and the embedding) does not fit node 0.
  ConfigJob uniform(generate_config("uniform"), 2);
  try {
    uniform.plan(a);
    FAIL() << "expected the plan not to fit";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the plan does not fit: stage 0 (layers 0-1) needs "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("on device 0 (node0:cpu:0), which has "),
              std::string::npos)
        << e.what();
  }
}

// With tensor parallelism the order search moves whole slots: a stage's two ranks stay on one
// node (devices 2 and 3 of node 1 run stage 0).
TEST_F(ModelJobPlan, TensorParallelRanksOfAMovedStageShareANode) {
  ConfigJob job(generate_config("measured", /*tp=*/2, /*per_node=*/2), 2);
  const schedule::PlanRequest r =
      plan_request(job.shape(), std::vector<wire::DeviceProfile>(4, device("node0:cpu:0", 50)));
  // Each rank holds half of the stage; a device's cap is its node's free memory / 2 devices, so
  // node 0's devices get (first + last) / 2 per rank with this free memory.
  const double last = one_layer_stage_bytes(r, false) / 2,
               first = one_layer_stage_bytes(r, true) / 2;
  wire::Assignment a;
  a.devices = {device("node0:cpu:0", 50, 10, first + last),
               device("node0:cpu:1", 50, 10, first + last), device("node1:cpu:0", 50),
               device("node1:cpu:1", 50)};
  job.plan(a);
  EXPECT_EQ(slots(a), (std::vector<int>{1, 0}));
  const PipelineLayout layout = job.layout(a);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(layout.slot(0, 0, rank).node, 1) << rank;
    EXPECT_EQ(layout.slot(0, 0, rank).device, Device::cpu(rank)) << rank;
    EXPECT_EQ(layout.slot(0, 1, rank).node, 0) << rank;
  }
  EXPECT_EQ(job.chosen_plan().stages[0].devices, (std::vector<int>{2, 3}));
}

// Note [Auto parallel of a run job]: node 0's search over 2 nodes x 2 devices, the second
// node 4x slower, picks the layout and number of groups whose plan predicts the shortest job,
// as planning every candidate config directly does (dp x pp of the 4 devices, groups from dp to
// min(5 prompts, 2 dp pp) in steps of dp), reads it, and puts it in the assignment's config.
TEST_F(ModelJobPlan, AutoParallelChoosesTheFastestPlannedLayout) {
  config::Config cfg = generate_config("uniform", 1, 2);
  for (const char* o : {"+graph.auto_parallel.enabled=true", "train.dist.pipeline_parallel_size=null",
                        "job.num_groups=null"})
    cfg.apply_override(o);
  const std::vector<wire::DeviceProfile> devices = {
      device("node0:cpu:0", 1, 1000), device("node0:cpu:1", 1, 1000),
      device("node1:cpu:0", 0.25, 250), device("node1:cpu:1", 0.25, 250)};
  double best = 1e30;
  std::string best_layout;
  int candidates = 0;
  for (int dp : {1, 2, 4})
    for (int groups = dp; groups <= std::min(5, 2 * 4); groups += dp) {
      config::Config c = generate_config("uniform", 1, 2);
      for (const std::string& o : {str_cat("+train.dist.data_parallel_size=", dp),
                                   str_cat("train.dist.pipeline_parallel_size=", 4 / dp),
                                   str_cat("job.num_groups=", groups)})
        c.apply_override(o);
      const double t = compile_job_plan(ConfigJob(c, 2).shape(), devices).timeline.step_time;
      ++candidates;
      if (t < best) {
        best = t;
        best_layout = str_cat(dp, " ", 4 / dp, " ", groups);
      }
    }
  ConfigJob job(cfg, 2);
  EXPECT_TRUE(job.searching());
  wire::Assignment a;
  a.devices = devices;
  job.plan(a);
  const config::Config chosen = config::Config::parse(a.config_yaml, "node 0's config");
  EXPECT_FALSE(chosen.get<bool>("graph.auto_parallel.enabled"));
  EXPECT_EQ(str_cat(chosen.get<int>("train.dist.data_parallel_size"), " ",
                    chosen.get<int>("train.dist.pipeline_parallel_size"), " ",
                    chosen.get<int>("job.num_groups")),
            best_layout);
  EXPECT_EQ(job.data_parallel_size() * job.pipeline_parallel_size(), 4);
  EXPECT_DOUBLE_EQ(predict_job(job, a).step_time, best);
  EXPECT_GT(candidates, 4);
  // What the search does not cover is one error naming it.
  config::Config synthetic = synthetic_config(4, 2, "uniform", 2, 1);
  synthetic.apply_override("+graph.auto_parallel.enabled=true");
  try {
    ConfigJob refused(synthetic, 2);
    ADD_FAILURE() << "a synthetic job with auto parallel was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("searches its layout for generate and encode jobs"),
              std::string::npos)
        << e.what();
  }
}

TEST(ConfigJobPlan, ErrorsNameWhatWasWrong) {
  ConfigJob job(synthetic_config(4, 2, "uniform", 2, 1), 2);
  wire::Assignment a;
  a.devices = {device("node0:cpu:0", 50)};
  EXPECT_THROW(
      {
        try {
          job.plan(a);
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("planning: 1 device profiles, but data 1 x pipeline "
                                               "2 x tensor 1 parallelism needs 2 devices"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      InvalidArgument);
  try {
    ConfigJob(config::Config::parse("train:\n  dist: {pipeline_parallel_size: 2, "
                                    "pipeline_num_layers: 4}\n  cluster: {profiles: {cpu:1: "
                                    "{matmul_gflops: 5}}}\njob: {_target_: synthetic}\n"),
              2);
    FAIL() << "expected an unknown device name to be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'cpu:1' is not a device of the cluster"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace libai::actors

namespace libai::actors {
namespace {

// A serve job (Note [Serve jobs]): planned for job.max_batch rows over its lanes, its stages
// by arrival; a key it would not read, prompts, or fewer rows than lanes are errors naming them.
TEST(ServeJob, PlannedForItsBatchAndCheckedByKey) {
  std::filesystem::path folder;
  for (auto f : families())
    if (f.name == "gpt2") folder = save_random_model(f, "serve_job_" + std::to_string(::getpid()));
  auto config = [&](const std::string& job) {
    return config::Config::parse(str_cat("model: {weights: ", folder.string(),
                                         "}\ntrain:\n  dist: {pipeline_parallel_size: 2}\n",
                                         "job: {_target_: serve", job, "}\n"));
  };
  ConfigJob job(config(", max_batch: 9, num_groups: 3, prompt_tokens: 5"), 2);
  EXPECT_TRUE(job.serving());
  EXPECT_EQ(job.num_groups(), 3);
  const JobShape shape = job.shape();
  EXPECT_EQ(shape.rows, 3);  // 9 rows over 3 lanes
  EXPECT_EQ(shape.input_tokens, 5);
  wire::Assignment a;
  a.devices = {device("node0:cpu:0", 100), device("node1:cpu:0", 100)};
  job.plan(a);
  EXPECT_TRUE(job.layout(a).by_arrival);
  // An assignment comes over the network: a layer on a stage out of range, out of order, or a
  // stage left empty is an error naming it (never an index past the per-stage tables).
  auto expect_refused = [&](std::vector<int64_t> stage_of, const std::string& named) {
    wire::Assignment bad = a;
    bad.stage_of.assign(stage_of.begin(), stage_of.end());
    bad.stage_of.resize(a.stage_of.size(), stage_of.back());
    try {
      job.layout(bad);
      ADD_FAILURE() << named << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  ASSERT_GE(a.stage_of.size(), 2u);
  expect_refused({0, 7}, "on stage 7");
  expect_refused({0, -1}, "on stage -1");
  expect_refused({1, 0}, "contiguous layers");
  expect_refused({0, 0}, "leaves stage 1 without layers");

  auto expect_error = [&](const std::string& job_keys, const std::string& named) {
    try {
      ConfigJob bad(config(job_keys), 2);
      ADD_FAILURE() << job_keys << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  expect_error(", temperature: 0.5", "job.temperature");
  expect_error(", prompts: [hi]", "job.prompts");
  expect_error(", max_batch: 1, num_groups: 2", "job.max_batch");
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace libai::actors
