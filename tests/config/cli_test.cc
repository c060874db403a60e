// The libai-actor command line: exit codes and output are a contract that scripts rely on.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "runtime/config/config.h"
#include "tests/config/test_files.h"

namespace libai::config {
namespace {

const std::string kBinary = LIBAI_BINARY_DIR "/bin/libai-actor";
const std::string kDefault = LIBAI_SOURCE_DIR "/configs/default.yaml";

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    // The target depends on libai-actor: a missing binary is a broken build, not a skip.
    ASSERT_TRUE(std::filesystem::exists(kBinary))
        << "libai-actor is not built (" << kBinary << "): build the libai-actor target";
  }

  Result run(const std::string& arguments) {
    const std::string err_path = scratch_.file("stderr.txt");
    const std::string command = "'" + kBinary + "' " + arguments + " 2>'" + err_path + "'";
    Result result;
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) {
      ADD_FAILURE() << "popen failed";
      return result;
    }
    char buffer[4096];
    std::size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream err(err_path);
    std::stringstream text;
    text << err.rdbuf();
    result.err = text.str();
    return result;
  }

  static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

  testing::TempDir scratch_;
};

TEST_F(Cli, Version) {
  const Result r = run("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "libai-actor " LIBAI_VERSION "\n");
}

TEST_F(Cli, HelpListsEverySubcommand) {
  const Result r = run("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* name : {"run", "generate", "plan", "convert", "bench", "embed", "fill-mask",
                           "classify", "forward", "config"})
    EXPECT_NE(r.out.find(std::string("  ") + name + " "), std::string::npos) << name;
}

TEST_F(Cli, UnknownSubcommandIsOneLineThenUsage) {
  const Result r = run("foo");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(first_line(r.err), "libai-actor: unknown subcommand 'foo'");
  EXPECT_NE(r.err.find("Usage: libai-actor"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(first_line(run("confg show x").err),
            "libai-actor: unknown subcommand 'confg' (did you mean 'config'?)");
}

TEST_F(Cli, UnknownOptionIsOneLineThenUsage) {
  const Result top = run("--frob");
  EXPECT_EQ(top.exit_code, 2);
  EXPECT_EQ(first_line(top.err), "libai-actor: unknown option '--frob'");
  const Result nested = run("config show '" + kDefault + "' --bogus");
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_EQ(first_line(nested.err), "libai-actor config show: unknown option '--bogus'");
  EXPECT_NE(nested.err.find("Usage: libai-actor config show"), std::string::npos) << nested.err;
}

TEST_F(Cli, MissingArgumentIsAUsageError) {
  const Result r = run("config show");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(first_line(r.err).find("CONFIG is required"), std::string::npos) << r.err;
}

TEST_F(Cli, BenchListsAndRunsTheRuntimeBenchmarks) {
  const Result list = run("bench");
  EXPECT_EQ(list.exit_code, 0) << list.err;
  for (const char* name : {"comm", "transfer", "pipeline", "pipeline-train", "schedules"})
    EXPECT_NE(list.out.find(std::string("  ") + name + " "), std::string::npos) << name;
  const Result unknown = run("bench nosuch");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("unknown benchmark 'nosuch' (known: comm, transfer"),
            std::string::npos)
      << unknown.err;
  const Result missing = run("bench schedules --bench-dir '" + scratch_.path() + "'");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("bench_pipeline_schedules is not in"), std::string::npos)
      << missing.err;
}

TEST_F(Cli, RunRejectsATrainingConfigByName) {
  const Result r = run("run '" + kDefault + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("job._target_ is 'train'"), std::string::npos) << r.err;
}

TEST_F(Cli, ConfigShowAppliesOverrides) {
  const Result r =
      run("config show '" + kDefault +
          "' train.dist.tensor_parallel_size=2 'train.dist.custom_pipeline_stage_id=[0,0,1,1]'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Config shown = Config::parse(r.out, "shown.yaml");
  EXPECT_EQ(shown.get<int>("train.dist.tensor_parallel_size"), 2);
  EXPECT_EQ(shown.get_list<int>("train.dist.custom_pipeline_stage_id"),
            (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(shown.get<std::string>("optim._target_"), "adamw");
}

TEST_F(Cli, ConfigShowJson) {
  const Result r = run("config show '" + kDefault + "' train.seed=7 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["train"]["seed"], 7);
  EXPECT_TRUE(json["train"]["global_batch_size"].is_null());
}

TEST_F(Cli, BadKeyIsOneErrorLineWithFileAndLine) {
  const std::string path = scratch_.write(
      "job.yaml", "_base_: '" + kDefault + "'\ntrain:\n  dist:\n    tensor_paralel_size: 2\n");
  const Result r = run("config show '" + path + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "libai-actor: error: " + path +
                       ":4:26: unknown key 'train.dist.tensor_paralel_size' (did you mean "
                       "'tensor_parallel_size'?)\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(Cli, BadOverrideValueIsAnError) {
  const Result r = run("config show '" + kDefault + "' train.amp.dtype=fp8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("libai-actor: error: <command line>: key 'train.amp.dtype'"),
            std::string::npos)
      << r.err;
}

// `plan` is schedule/ seen from the command line: the balanced split gives the 4x faster
// device 10 of 12 layers and beats the uniform split's step time (values from the pure
// planner's closed forms: 1F1B over 8 micro-batches, forward 1 unit per layer at speed 1).
TEST_F(Cli, PlanBalancesAMixedPipeline) {
  const std::string base = "plan '" + kDefault +
                           "' train.dist.pipeline_parallel_size=2 train.dist.pipeline_num_layers=12"
                           " train.num_accumulation_steps=8 'train.dist.device_speed=[1,4]'";
  const Result balanced = run(base + " train.dist.balance=measured");
  ASSERT_EQ(balanced.exit_code, 0) << balanced.err;
  EXPECT_NE(balanced.out.find("stage 1: layers 2-11 (10)"), std::string::npos) << balanced.out;
  EXPECT_NE(balanced.out.find("step time 66.00 units"), std::string::npos) << balanced.out;
  const Result uniform = run(base);
  ASSERT_EQ(uniform.exit_code, 0) << uniform.err;
  EXPECT_NE(uniform.out.find("stage 1: layers 6-11 (6)"), std::string::npos) << uniform.out;
  EXPECT_NE(uniform.out.find("step time 144.00 units"), std::string::npos) << uniform.out;
}

TEST_F(Cli, PlanErrorsNameTheKey) {
  const Result no_layers = run("plan '" + kDefault + "' train.dist.pipeline_parallel_size=2");
  EXPECT_EQ(no_layers.exit_code, 1);
  EXPECT_NE(no_layers.err.find("train.dist.pipeline_num_layers is null"), std::string::npos)
      << no_layers.err;
  const Result bad_split =
      run("plan '" + kDefault +
          "' train.dist.pipeline_parallel_size=2 train.dist.pipeline_num_layers=4"
          " 'train.dist.custom_pipeline_stage_id=[0,1,0,1]'");
  EXPECT_EQ(bad_split.exit_code, 1);
  EXPECT_NE(bad_split.err.find("custom_pipeline_stage_id[2] = 0"), std::string::npos)
      << bad_split.err;
}

// Training plans name their schedule, the activations it stashes, the memory per device and the
// bubble beside its formula. Values by hand: 8 layers of 1 GiB on 4 equal stages (2 each), 0.5
// GiB of activations per layer and micro-batch, 8 micro-batches. 1F1B stashes p - s micro-
// batches (device 0: 4 x 2 x 0.5 = 4 GiB) and idles (p-1)/(m+p-1) = 3/11; GPipe stashes all 8
// (8 GiB); interleaved over 2 chunks (1 layer each) stashes on device d (p-d-1) 2 + (v-1) p + 1
// chunks (11, 9, 7, 5; device 0: 11 x 0.5 = 5.5 GiB) and idles (p-1)/(v m+p-1) = 3/19.
TEST_F(Cli, PlanShowsTheTrainingSchedule) {
  const std::string base = "plan '" + kDefault +
                           "' train.dist.pipeline_parallel_size=4 train.dist.pipeline_num_layers=8"
                           " train.num_accumulation_steps=8 train.dist.layer_memory=1"
                           " train.dist.activation_memory=0.5";
  const Result one = run(base);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  for (const char* line :
       {"plan: 8 layers, 4 stages, 8 micro-batches (1F1B), balance uniform",
        "peak stashed activations (micro-batches per stage, 1F1B): 4 3 2 1",
        "memory per device (weights + the activations the schedule stashes at its peak):",
        "device 0 (stage 0): 6.00 GiB (2.00 GiB + 4.00 GiB) of unlimited",
        "device 3 (stage 3): 3.00 GiB (2.00 GiB + 1.00 GiB) of unlimited",
        "bubble 27.3% of the step (ideal (p-1)/(m+p-1) = 3/11 = 27.3%)"})
    EXPECT_NE(one.out.find(line), std::string::npos) << line << "\n" << one.out;
  const Result all = run(base + " train.dist.pipeline_schedule=gpipe");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  for (const char* line : {"8 micro-batches (GPipe)", "(micro-batches per stage, GPipe): 8 8 8 8",
                           "device 0 (stage 0): 10.00 GiB (2.00 GiB + 8.00 GiB) of unlimited",
                           "bubble 27.3% of the step (ideal (p-1)/(m+p-1) = 3/11 = 27.3%)"})
    EXPECT_NE(all.out.find(line), std::string::npos) << line << "\n" << all.out;
  const Result interleaved =
      run(base + " train.dist.pipeline_schedule=interleaved train.dist.virtual_pipeline_size=2");
  ASSERT_EQ(interleaved.exit_code, 0) << interleaved.err;
  for (const char* line :
       {"8 micro-batches (interleaved 1F1B, 2 chunks per stage)",
        "stage 0 chunk 1: layers 4-4 (1), device 0 (speed 1.00), 1.00 units per micro-batch",
        "(micro-batch chunks per stage, interleaved 1F1B, 2 chunks per stage): 11 9 7 5",
        "device 0 (stage 0): 7.50 GiB (2.00 GiB + 5.50 GiB) of unlimited",
        "bubble 15.8% of the step (ideal (p-1)/(v m+p-1) = 3/19 = 15.8%; Megatron's (p-1)/(v m) "
        "= 18.8% of the ideal time)",
        "device 3 |"})
    EXPECT_NE(interleaved.out.find(line), std::string::npos) << line << "\n" << interleaved.out;
  // f + b = 2 layers x 3 units: 1F1B's step (m + p - 1) 6 = 66, interleaved (m v + p - 1) 6 / v.
  EXPECT_NE(one.out.find("step time 66.00 units"), std::string::npos) << one.out;
  EXPECT_NE(interleaved.out.find("step time 57.00 units"), std::string::npos) << interleaved.out;
}

TEST_F(Cli, PlanScheduleErrorsNameTheKey) {
  const std::string base = "plan '" + kDefault +
                           "' train.dist.pipeline_parallel_size=4 train.dist.pipeline_num_layers=8"
                           " train.num_accumulation_steps=6";
  const Result chunks = run(base + " train.dist.virtual_pipeline_size=2");
  EXPECT_EQ(chunks.exit_code, 1);
  EXPECT_NE(chunks.err.find("train.dist.virtual_pipeline_size is 2 but "
                            "train.dist.pipeline_schedule is 1f1b"),
            std::string::npos)
      << chunks.err;
  const Result name = run(base + " train.dist.pipeline_schedule=zero_bubble");
  EXPECT_EQ(name.exit_code, 1);
  EXPECT_NE(name.err.find("train.dist.pipeline_schedule"), std::string::npos) << name.err;
  const Result groups =
      run(base + " train.dist.pipeline_schedule=interleaved train.dist.virtual_pipeline_size=2");
  EXPECT_EQ(groups.exit_code, 1);
  EXPECT_NE(groups.err.find("train.num_accumulation_steps is 6, not a multiple of "
                            "train.dist.pipeline_parallel_size 4"),
            std::string::npos)
      << groups.err;
  const Result layers = run(base +
                            " train.num_accumulation_steps=8 train.dist.pipeline_schedule="
                            "interleaved train.dist.virtual_pipeline_size=4");
  EXPECT_EQ(layers.exit_code, 1);
  EXPECT_NE(layers.err.find("16 virtual stages"), std::string::npos) << layers.err;
}

// Generation plans decode groups step by step; --svg draws the same timeline. Values from
// the decoding closed form (schedule/): 4 equal stages of 3 units, 4 groups, 8 steps:
// (T G + p - 1) f = (32 + 3) 3 = 105 units.
TEST_F(Cli, PlanDecodingWithAPicture) {
  const std::string svg = scratch_.file("plan.svg");
  const Result r = run("plan '" + kDefault +
                       "' job._target_=generate +job.max_new_tokens=8 +job.num_groups=4"
                       " train.dist.pipeline_parallel_size=4 train.dist.pipeline_num_layers=12"
                       " --svg '" +
                       svg + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("4 groups x 8 steps (decoding)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stage 0: layers 0-2 (3), device 0 (speed 1.00), 3.00 units per step of "
                       "a group, 1 input slot"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step time 105.00 units"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("throughput 0.305 tokens per unit"), std::string::npos) << r.out;
  std::ifstream in(svg);
  std::stringstream picture;
  picture << in.rdbuf();
  EXPECT_NE(picture.str().find("step time 105.000 units"), std::string::npos);
}

// What does not fit is printed, then named in the error: stage 1 holds 3 layers of 1 GiB
// and the activations of 1 micro-batch in flight (1F1B's last stage), 3 x 0.5 GiB.
TEST_F(Cli, PlanNamesTheDeviceThatDoesNotFit) {
  const Result r = run("plan '" + kDefault +
                       "' train.dist.pipeline_parallel_size=2 train.dist.pipeline_num_layers=6"
                       " train.num_accumulation_steps=4 'train.dist.device_memory=[16,4]'"
                       " train.dist.layer_memory=1 train.dist.activation_memory=0.5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("device 1 (stage 1): 4.50 GiB (3.00 GiB + 1.50 GiB) of 4.00 GiB  DOES NOT "
                       "FIT"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("stage 1 (layers 3-5) does not fit device 1: it needs 4831838208 bytes"),
            std::string::npos)
      << r.err;
  // The balanced split moves a layer to the roomy device and fits.
  const Result balanced =
      run("plan '" + kDefault +
          "' train.dist.pipeline_parallel_size=2 train.dist.pipeline_num_layers=6"
          " train.num_accumulation_steps=4 'train.dist.device_memory=[16,4]'"
          " train.dist.layer_memory=1 train.dist.activation_memory=0.5"
          " train.dist.balance=measured");
  EXPECT_EQ(balanced.exit_code, 0) << balanced.err;
}

// Plans with real costs: the GPT-2 fixture (2 layers, hidden 48, inner 100, vocabulary 503, 64
// positions), 5 prompts (the longest of 4 tokens) in 2 groups of at most 3 rows, 6 new tokens,
// on devices of 1 GFLOP/s and 1 GB/s. By hand (models/stages/cost.cc's formulas): a layer's
// prefill is 2 x 12 x (4 x 48^2 + 2 x 48 x 100) + 4 x 12 x 4 x 48 = 460800 flops (460.8 us), a
// decoding step over the mean context 7 is 2 x 3 x 18816 + 4 x 3 x 7 x 48 = 116928 flops
// (116.928 us; it reads 77392 bytes of weights and 8064 of KV cache: 85.456 us); the embedding
// reads 12 rows of 192 bytes (2.304 us) at the prefill and 3 (0.576 us) per step. A layer holds
// 19348 f32 parameters (77392 bytes), the embedding (503 + 64) x 48 (108864 bytes), the tied
// head again 503 x 48 + 96 (96960 bytes); each group's KV cache 3 x 10 tokens x 384 bytes.
const char* kGpt2Job =
    "model: {weights: " LIBAI_SOURCE_DIR
    "/tests/data/models/gpt2}\n"
    "job:\n  _target_: generate\n  prompt_ids: [[5, 6, 7], [9], [11, 3, 30, 2], [8, 8], [20, 21]]\n"
    "  max_new_tokens: 6\n  num_groups: 2\n";

std::string job_config(const testing::TempDir& dir, const std::string& job, const std::string& dist,
                       const std::string& cluster) {
  return dir.write("job.yaml", "_base_: [" + kDefault + "]\n" + job + "train:\n  dist: " + dist +
                                   "\n  cluster: " + cluster + "\n");
}

TEST_F(Cli, PlanOfAModelJobInSecondsAndBytes) {
  const std::string config = job_config(
      scratch_, kGpt2Job, "{pipeline_parallel_size: 2}",
      "{profiles: {node0:cpu:0: {matmul_gflops: 1, memory_bandwidth_gbs: 1, free_memory_bytes: "
      "1e9}, node1:cpu:0: {matmul_gflops: 1, memory_bandwidth_gbs: 1, free_memory_bytes: 1e9}}}");
  const Result r = run("plan '" + config + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {
           "plan: 2 layers of gpt2 (",
           "2 stages, 2 groups x 6 steps (decoding), balance uniform\n",
           "  2 device(s) on 2 node(s) x 1: data 1 x pipeline 2 x tensor 1\n",
           "  stage 0: layers 0-0 (1), node0:cpu:0 (1 GFLOP/s, 1 GB/s), 117.5 us per step of a "
           "group (prefill 463.1 us), 1 input slot\n",
           "  node0:cpu:0 (stage 0): 204.39 KiB (181.89 KiB + 22.50 KiB) of 953.67 MiB\n",
           "  node1:cpu:0 (stage 1): 192.77 KiB (170.27 KiB + 22.50 KiB) of 953.67 MiB\n",
           "predicted job time ",
       })
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\nin:\n" << r.out;
  // The head: 2 x 3 x 48 x 503 + 5 x 3 x 48 = 145584 flops on the last stage at every step.
  EXPECT_NE(r.out.find("  stage 1: layers 1-1 (1), node1:cpu:0 (1 GFLOP/s, 1 GB/s), 262.5 us per "
                       "step of a group (prefill 606.4 us), 2 input slots\n"),
            std::string::npos)
      << r.out;
}

// train.dist.stage_precision auto over [f32, int8]: node 1 (150 000 bytes) holds neither an f32
// layer with its KV cache (100 432 bytes) and the f32 head (96 960) nor the embedding (108 864)
// with any layer, but an int8 layer (19 348 + 23 040) and the int8 head (24 240 + 96 x 4 / 4):
// the plan puts node 1 last in int8 and prints each stage's precision; with 60 000 bytes
// nothing fits, which is one error naming the choices.
TEST_F(Cli, PlanOfPrecisionsPerStage) {
  auto config = [&](int64_t small) {
    return job_config(
        scratch_, kGpt2Job,
        "{pipeline_parallel_size: 2, balance: measured, stage_precision: auto, "
        "stage_precision_choices: [f32, int8]}",
        "{profiles: {node0:cpu:0: {matmul_gflops: 1, memory_bandwidth_gbs: 1, free_memory_bytes: "
        "1e9}, node1:cpu:0: {matmul_gflops: 1, memory_bandwidth_gbs: 1, free_memory_bytes: " +
            std::to_string(small) + "}}}");
  };
  const Result r = run("plan '" + config(150000) + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"weights per stage", "stage 0: layers 0-0 (1), node0:cpu:0",
                           "stage 1: layers 1-1 (1), node1:cpu:0"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\nin:\n" << r.out;
  EXPECT_NE(r.out.find(", weights f32, 1 input slot"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", weights int8, 2 input slots"), std::string::npos) << r.out;
  const Result none = run("plan '" + config(60000) + "'");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("train.dist.stage_precision auto: no choice of precisions per stage (of "
                          "f32, int8) fits"),
            std::string::npos)
      << none.err;
}

// `plan` and `run` compile the same request: the same split and the same predicted time, for
// synthetic stages (8 layers of 1 ms on the device of 100 GFLOP/s, 4 ms on the one of 25: the
// fast one takes 7, 2 micro-batches take 7 + 4 + 7 = 18 ms) and for the GPT-2 fixture.
TEST_F(Cli, PlanAndRunChooseTheSameSplitAndPrediction) {
  // Hops cost nothing here: `plan` cannot measure them, `run` would.
  const std::string profiles =
      "{devices_per_node: 2, local_hop_seconds: 0.0, remote_hop_seconds: 0.0, profiles: "
      "{node0:cpu:0: {matmul_gflops: 100, memory_bandwidth_gbs: "
      "10}, node0:cpu:1: {matmul_gflops: 25, memory_bandwidth_gbs: 2.5}}}";
  const std::string synthetic = job_config(
      scratch_, "job: {_target_: synthetic, layer_seconds: 0.001, num_micro_batches: 2}\n",
      "{pipeline_parallel_size: 2, pipeline_num_layers: 8, balance: measured}", profiles);
  const Result planned = run("plan '" + synthetic + "'");
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find("stage 0: layers 0-6 (7), node0:cpu:0 (100 GFLOP/s, 10 GB/s), 7.000 "
                             "ms per micro-batch"),
            std::string::npos)
      << planned.out;
  EXPECT_NE(planned.out.find("predicted job time 18.000 ms"), std::string::npos) << planned.out;
  const Result ran = run("run '" + synthetic + "' --json");
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const auto doc = nlohmann::json::parse(ran.out);
  EXPECT_EQ(doc["plan"]["stage_of"], nlohmann::json({0, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(doc["plan"]["device_of_stage"], nlohmann::json({0, 1}));
  EXPECT_NEAR(doc["plan"]["predicted_seconds"].get<double>(), 0.018, 1e-12);

  const std::string model =
      job_config(scratch_, kGpt2Job, "{pipeline_parallel_size: 2, balance: measured}", profiles);
  const Result model_plan = run("plan '" + model + "'");
  ASSERT_EQ(model_plan.exit_code, 0) << model_plan.err;
  const Result model_run = run("run '" + model + "' --json");
  ASSERT_EQ(model_run.exit_code, 0) << model_run.err;
  const auto model_doc = nlohmann::json::parse(model_run.out);
  EXPECT_EQ(model_doc["plan"]["stage_of"], nlohmann::json({0, 1}));
  char predicted[64];  // actors::format_seconds below a millisecond
  std::snprintf(predicted, sizeof predicted, "predicted job time %.1f us",
                model_doc["plan"]["predicted_seconds"].get<double>() * 1e6);
  EXPECT_NE(model_plan.out.find(predicted), std::string::npos) << predicted << "\nin:\n"
                                                               << model_plan.out;
  EXPECT_EQ(model_doc["sequences"].size(), 5u);
}

// A plan that does not fit fails on node 0 before any stage is loaded, naming the stage, the
// device and the bytes: stage 1 holds a layer, the head and two groups' KV caches, 77392 +
// 96960 + 2 x 11520 = 197392 bytes, and node0:cpu:1 has half of its node's 200000 bytes.
TEST_F(Cli, RunAndPlanNameTheDeviceThatLacksMemory) {
  const std::string config =
      job_config(scratch_, kGpt2Job, "{pipeline_parallel_size: 2}",
                 "{devices_per_node: 2, profiles: {node0:cpu:1: {free_memory_bytes: 200000}}}");
  const std::string expected =
      "the plan does not fit: stage 1 (layers 1-1) needs 197392 bytes (192.77 KiB: weights 170.27 "
      "KiB, kv cache 22.50 KiB) on device 1 (node0:cpu:1), which has 100000 bytes (97.66 KiB: its "
      "node's free memory / 2 device(s) per node)";
  const Result ran = run("run '" + config + "'");
  EXPECT_EQ(ran.exit_code, 1);
  EXPECT_NE(ran.err.find(expected), std::string::npos) << ran.err;
  EXPECT_EQ(ran.out, "");
  const Result planned = run("plan '" + config + "'");
  EXPECT_EQ(planned.exit_code, 1);
  EXPECT_NE(planned.out.find("node0:cpu:1 (stage 1): 192.77 KiB (170.27 KiB + 22.50 KiB) of 97.66 "
                             "KiB  DOES NOT FIT"),
            std::string::npos)
      << planned.out;
  EXPECT_NE(planned.err.find(expected), std::string::npos) << planned.err;
}

TEST_F(Cli, PlanRefusesAProfileOfNoDevice) {
  const std::string config = job_config(scratch_, kGpt2Job, "{pipeline_parallel_size: 2}",
                                        "{profiles: {cpu:1: {matmul_gflops: 5}}}");
  const Result r = run("plan '" + config + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'cpu:1' is not a device of the cluster; its devices are node<k>:cpu:<d> "
                       "for k < 2 (nodes)"),
            std::string::npos)
      << r.err;
}

// Keys a command cannot act on are errors naming the key and why (runtime/config/unimplemented.h),
// all of them at once.
TEST_F(Cli, RunAndPlanRefuseKeysTheyCannotActOn) {
  const std::string config = job_config(scratch_, kGpt2Job, "{pipeline_parallel_size: 2}", "{}");
  const Result ran = run("run '" + config + "' train.amp.enabled=true train.dist.layer_memory=1");
  EXPECT_EQ(ran.exit_code, 1);
  EXPECT_NE(ran.err.find("libai-actor: error: 2 settings are not implemented for a run job:   "
                         "<command line>: key 'train.amp.enabled' = true: train.amp applies to "
                         "training; run jobs are inference"),
            std::string::npos)
      << ran.err;
  EXPECT_NE(ran.err.find("key 'train.dist.layer_memory' = 1: a what-if planning key"),
            std::string::npos)
      << ran.err;
  const Result planned = run("plan '" + config + "' train.zero_optimization.enabled=true");
  EXPECT_EQ(planned.exit_code, 1);
  EXPECT_NE(planned.err.find("key 'train.zero_optimization.enabled' = true: ZeRO"),
            std::string::npos)
      << planned.err;
  const Result layers = run("plan '" + config + "' train.dist.pipeline_num_layers=6");
  EXPECT_EQ(layers.exit_code, 1);
  EXPECT_NE(layers.err.find("key 'train.dist.pipeline_num_layers' = 6: the model in"),
            std::string::npos)
      << layers.err;
  const Result what_if =
      run("plan '" + kDefault +
          "' train.dist.pipeline_parallel_size=2 train.dist.pipeline_num_layers=4"
          " train.activation_checkpoint.enabled=true");
  EXPECT_EQ(what_if.exit_code, 1);
  EXPECT_NE(what_if.err.find("<command line>: key 'train.activation_checkpoint.enabled' = true: "
                             "the planner does not model recomputation yet"),
            std::string::npos)
      << what_if.err;
}

// A typo'd section is reported at its own line, and every problem is listed (the CLI prints
// an error on one line: the list's line breaks become spaces).
TEST_F(Cli, EveryConfigProblemIsListed) {
  const std::string path = scratch_.write(
      "job.yaml", "_base_: '" + kDefault + "'\ntrian:\n  seed: 1\noptim:\n  lr: 0\n");
  const Result r = run("config show '" + path + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "libai-actor: error: 2 problems in the config:   " + path +
                       ":5:7: key 'optim.lr': out of range: expected a number > 0, got 0   " +
                       path + ":2:1: unknown key 'trian' (did you mean 'train'?)\n");
}

}  // namespace
}  // namespace libai::config
