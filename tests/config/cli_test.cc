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
    if (!std::filesystem::exists(kBinary)) GTEST_SKIP() << "libai-actor is not built";
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

TEST_F(Cli, UnimplementedCommandsExitThree) {
  for (const char* name : {"bench"}) {
    const Result r = run(std::string(name) + " --model x");
    EXPECT_EQ(r.exit_code, 3) << name;
    EXPECT_EQ(r.err, "libai-actor " + std::string(name) + ": not implemented yet in this build\n");
  }
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

}  // namespace
}  // namespace libai::config
