// `libai-plan`, the planner's own binary (bin/libai_plan_main.cc): it links libai_plan and not
// the actor library (no CAF, no UCX, no Cap'n Proto), and prints byte for byte what
// `libai-actor plan` prints for every kind of plan, with the devices' timings fixed by
// train.cluster.profiles so that the two runs measure nothing that could differ. Also the
// configs `plan` used to refuse: a serve job plans as `run` would run it, and an eager
// training config plans its layout in graph mode, saying so.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/bin/cli_fixture.h"

namespace libai::testing {
namespace {

const std::string kPlanBinary = LIBAI_BINARY_DIR "/bin/libai-plan";
const std::string kSource = LIBAI_SOURCE_DIR "/";

// Every field of a device fixed: rates, free memory and the timed layer.
std::string fixed_device(double gflops) {
  return "{matmul_gflops: " + std::to_string(gflops) +
         ", memory_bandwidth_gbs: " + std::to_string(gflops / 10) +
         ", free_memory_bytes: 8000000000, layer_seconds: " + std::to_string(0.1 / gflops) +
         ", layer_step_seconds: " + std::to_string(0.2 / gflops) + "}";
}

class PlanBinary : public ModelCommands {
 protected:
  void SetUp() override {
    ModelCommands::SetUp();
    ASSERT_TRUE(std::filesystem::exists(kPlanBinary))
        << "libai-plan is not built (" << kPlanBinary << "): build the libai-plan target";
  }

  // From the source tree: the shipped configs name their model folders relative to it.
  Result run_plan(const std::string& arguments) {
    return run_program(kPlanBinary, arguments, kSource);
  }

  // `libai-actor plan ARGS` and `libai-plan ARGS`: the same output, exit code and error (each
  // error line starts with its own program's name).
  Result expect_same_plan(const std::string& arguments) {
    const Result actor = run("plan " + arguments);
    const Result alone = run_plan(arguments);
    EXPECT_EQ(alone.exit_code, actor.exit_code) << arguments << "\n" << alone.err;
    EXPECT_EQ(alone.out, actor.out) << arguments;
    const std::string prefix = "libai-actor: ";
    if (actor.err.rfind(prefix, 0) == 0)
      EXPECT_EQ(alone.err, "libai-plan: " + actor.err.substr(prefix.size())) << arguments;
    else
      EXPECT_EQ(alone.err, actor.err) << arguments;
    return actor;
  }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = scratch_.file(name);
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(PlanBinary, LinksThePlannerAndNotTheActorLibrary) {
  FILE* pipe = popen(("ldd " + shell_quote(kPlanBinary)).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string libraries;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) libraries.append(buffer, n);
  ASSERT_EQ(pclose(pipe), 0) << libraries;
  EXPECT_NE(libraries.find("libai_plan.so"), std::string::npos) << libraries;
  // (UCX comes with libai_runtime's communicators; CAF and Cap'n Proto are the actors' alone.)
  for (const char* absent : {"libai_actors", "libai_train", "libai_service", "libcaf",
                             "libcapnp", "libkj"})
    EXPECT_EQ(libraries.find(absent), std::string::npos) << absent << " in\n" << libraries;

  const Result version = run_plan("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, "libai-plan " LIBAI_VERSION "\n");
  const Result usage = run_plan("");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("Usage: libai-plan"), std::string::npos) << usage.err;
}

TEST_F(PlanBinary, PrintsWhatLibaiActorPlanPrints) {
  const std::string defaults = kSource + "configs/default.yaml";
  // What-if plans: inference, a training schedule with memory, decoding, and one that fails.
  expect_same_plan(shell_quote(defaults) +
                   " train.dist.pipeline_parallel_size=2 train.dist.pipeline_num_layers=8");
  const Result train = expect_same_plan(
      shell_quote(defaults) +
      " job._target_=train train.dist.pipeline_parallel_size=4 train.dist.pipeline_num_layers=8"
      " train.num_accumulation_steps=8 train.dist.layer_memory=1 train.dist.activation_memory=0.5"
      " 'train.dist.device_speed=[1, 2, 1, 1]'");
  EXPECT_EQ(train.exit_code, 0) << train.err;
  EXPECT_NE(train.out.find("peak stashed activations"), std::string::npos) << train.out;
  expect_same_plan(shell_quote(defaults) +
                   " job._target_=generate train.dist.pipeline_parallel_size=2"
                   " train.dist.pipeline_num_layers=6 job.max_new_tokens=4");
  expect_same_plan(shell_quote(defaults) + " train.dist.pipeline_parallel_size=2");

  // A run job of the GPT-2 fixture over two nodes, every device fixed.
  const std::string cluster = "{nodes: 2, profiles: {node0:cpu:0: " + fixed_device(100) +
                              ", node1:cpu:0: " + fixed_device(25) + "}}";
  const std::string run_job = write(
      "run.yaml", "_base_: [" + defaults + "]\nmodel: {weights: " + kModels +
                      "gpt2}\njob: {_target_: generate, prompt_ids: [[5, 6, 7], [9]], "
                      "max_new_tokens: 4}\ntrain:\n  dist: {pipeline_parallel_size: 2, balance: "
                      "measured}\n  cluster: " + cluster + "\n");
  const Result ran = expect_same_plan(shell_quote(run_job));
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_NE(ran.out.find("predicted job time"), std::string::npos) << ran.out;

  // A model's training (text and JSON) and its auto-parallel search.
  const std::string model = write(
      "config.json",
      R"({"model_type": "gpt2", "n_layer": 4, "n_embd": 32, "n_head": 4, "n_inner": 64,
          "n_positions": 64, "vocab_size": 503, "activation_function": "gelu_new",
          "layer_norm_epsilon": 1e-5, "bos_token_id": 2, "eos_token_id": 2})");
  const std::string common = kSource + "configs/common/";
  const std::string training = write(
      "train.yaml", "_base_: [" + common + "train.yaml, " + common + "optim.yaml, " + common +
                        "graph.yaml]\ngraph: {enabled: true}\nmodel: {config: " + model +
                        "}\ndata: {_target_: gpt, prefix: unused, seq_length: 16}\ntrain:\n"
                        "  train_micro_batch_size: 2\n  num_accumulation_steps: 4\n  dist: "
                        "{pipeline_parallel_size: 2, balance: measured}\n  cluster: " +
                        cluster + "\n");
  const Result trained = expect_same_plan(shell_quote(training));
  EXPECT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_NE(trained.out.find("training plan: 4 layers of gpt2"), std::string::npos) << trained.out;
  expect_same_plan(shell_quote(training) + " --json");
  const Result searched = expect_same_plan(
      shell_quote(training) +
      " graph.auto_parallel.enabled=true train.global_batch_size=8 train.dist.balance=uniform"
      " train.num_accumulation_steps=null"  // the links fixed too (unset, they are probed)
      " 'graph.auto_parallel.intra_node={bandwidth_gbs: 20, latency_seconds: 2.0e-6}'"
      " 'graph.auto_parallel.inter_node={bandwidth_gbs: 2, latency_seconds: 5.0e-6}'");
  EXPECT_NE(searched.out.find("the chosen layout's plan"), std::string::npos) << searched.err;
}

// A serve job plans as `run` runs its generate job: the model's costs on the nodes' devices.
TEST_F(PlanBinary, ServeConfigPlansItsStages) {
  const Result r = run_plan(shell_quote(kSource + "configs/pipeline_serve.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: 2 layers of gpt2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stage 1: layers 1-1 (1), node1:cpu:0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted job time"), std::string::npos) << r.out;
}

// An eager training config: the plan its layout would have in graph mode, after a line that
// says so; the same plan as with graph.enabled=true.
TEST_F(PlanBinary, EagerTrainingConfigPlansItsLayoutInGraphMode) {
  const std::string config = kSource + "configs/demo/train_char_gpt.yaml";
  const std::string fixed = " 'train.cluster.profiles={node0:cpu:0: " + fixed_device(50) + "}'";
  const Result eager = run_plan(shell_quote(config) + fixed);
  ASSERT_EQ(eager.exit_code, 0) << eager.err;
  const std::string said =
      "graph.enabled is false: `libai-actor train` trains this config eagerly in one process; "
      "below is the plan of its layout in graph mode (graph.enabled=true)\n";
  ASSERT_EQ(eager.out.rfind(said, 0), 0u) << eager.out;
  const Result graph = run_plan(shell_quote(config) + fixed + " graph.enabled=true");
  ASSERT_EQ(graph.exit_code, 0) << graph.err;
  EXPECT_EQ(eager.out.substr(said.size()), graph.out);
  EXPECT_NE(graph.out.find("training plan: 4 layers of gpt2"), std::string::npos) << graph.out;
}

}  // namespace
}  // namespace libai::testing
