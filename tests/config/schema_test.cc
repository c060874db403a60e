// Schema validation: each kind of bad value gives its documented message.
#include <gtest/gtest.h>

#include "runtime/config/config.h"
#include "app/schema.h"
#include "tests/config/test_files.h"

namespace libai::config {
namespace {

using testing::error_message;

std::string problem_of(const std::string& yaml) {
  const Config cfg = Config::parse(yaml, "job.yaml");
  return error_message<InvalidArgument>([&] { cfg.validate(libai_schema()); });
}

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

TEST(Schema, UnknownKeyHasDidYouMean) {
  const std::string message = problem_of("train:\n  dist:\n    tensor_paralel_size: 2\n");
  EXPECT_TRUE(contains(message,
                       "job.yaml:3:26: unknown key 'train.dist.tensor_paralel_size' "
                       "(did you mean 'tensor_parallel_size'?)"))
      << message;
}

TEST(Schema, UnknownTopLevelSection) {
  const std::string message = problem_of("optimm: {lr: 1}\n");
  EXPECT_TRUE(contains(message, "unknown key 'optimm' (did you mean 'optim'?)")) << message;
}

TEST(Schema, WrongType) {
  const std::string message = problem_of("train:\n  seed: abc\n");
  EXPECT_TRUE(contains(message,
                       "job.yaml:2:9: key 'train.seed': wrong type: expected an integer "
                       ">= 0, got \"abc\" (a string)"))
      << message;
  EXPECT_TRUE(contains(problem_of("train: {amp: {enabled: 1}}\n"), "expected a boolean"));
  EXPECT_TRUE(contains(problem_of("train: {train_iter: 2.5}\n"), "got 2.5 (a float)"));
  EXPECT_TRUE(contains(problem_of("train: {seed: null}\n"), "got null"));
}

TEST(Schema, OutOfRange) {
  const std::string message = problem_of("train:\n  dist:\n    tensor_parallel_size: 0\n");
  EXPECT_TRUE(contains(message,
                       "job.yaml:3:27: key 'train.dist.tensor_parallel_size': out of "
                       "range: expected an integer >= 1, or null, got 0"))
      << message;
  EXPECT_TRUE(contains(problem_of("train: {zero_optimization: {stage: 4}}\n"),
                       "expected an integer in [0, 3], got 4"));
  EXPECT_TRUE(contains(problem_of("optim: {_target_: adamw, clip_grad_norm: 0}\n"),
                       "expected a number > 0, or null, got 0"));
  EXPECT_TRUE(contains(problem_of("train: {cluster: {port: 70000}}\n"), "got 70000"));
}

TEST(Schema, EnumWithDidYouMean) {
  const std::string message = problem_of("train: {dist: {balance: mesured}}\n");
  EXPECT_TRUE(contains(message,
                       "key 'train.dist.balance': expected one of uniform, measured, "
                       "memory, or null, got \"mesured\" (did you mean 'measured'?)"))
      << message;
}

TEST(Schema, ListItemsAndLength) {
  const std::string item = problem_of("train: {dist: {custom_pipeline_stage_id: [0, -1]}}\n");
  EXPECT_TRUE(contains(item, "key 'train.dist.custom_pipeline_stage_id[1]': out of range")) << item;
  const std::string length = problem_of("optim: {_target_: adamw, betas: [0.9]}\n");
  EXPECT_TRUE(contains(length, "expected a list of 2 items")) << length;
  const Config ok = Config::parse("train: {dist: {custom_pipeline_stage_id: null}}\n");
  EXPECT_NO_THROW(ok.validate(libai_schema()));
}

TEST(Schema, RequiredKey) {
  const std::string message = problem_of("optim: {lr: 0.1}\n");
  EXPECT_TRUE(contains(message, "key 'optim': missing required key '_target_'")) << message;
}

TEST(Schema, UnknownKeyOfAMapIsReportedAtTheKey) {
  // The value of `trian:` is a block map whose first entry is on line 2; the typo is on line 1.
  const std::string message = problem_of("trian:\n  seed: 1\n");
  EXPECT_TRUE(contains(message, "job.yaml:1:1: unknown key 'trian' (did you mean 'train'?)"))
      << message;
  const std::string nested = problem_of("train:\n  distt:\n    balance: uniform\n");
  EXPECT_TRUE(contains(nested, "job.yaml:2:3: unknown key 'train.distt'")) << nested;
}

TEST(Schema, ListsEveryProblem) {
  const std::string message = problem_of("train: {seed: -1, log_period: 0, nope: 1}\n");
  EXPECT_TRUE(contains(message, "3 problems")) << message;
  EXPECT_TRUE(contains(message, "key 'train.seed': out of range")) << message;
  EXPECT_TRUE(contains(message, "key 'train.log_period': out of range")) << message;
  EXPECT_TRUE(contains(message, "unknown key 'train.nope'")) << message;
  EXPECT_FALSE(contains(message, "more problems")) << message;
}

TEST(Schema, OpenSectionsAcceptAnything) {
  const Config cfg =
      Config::parse("model: {anything: [1, 2], nested: {x: y}}\njob: {_target_: train, n: 1}\n");
  EXPECT_NO_THROW(cfg.validate(libai_schema()));
}

TEST(Schema, OverrideErrorsNameTheCommandLine) {
  Config cfg = Config::parse("train: {dist: {tensor_parallel_size: 1}}\n");
  cfg.apply_override("train.dist.tensor_parallel_size=0");
  const std::string message = error_message<InvalidArgument>([&] { cfg.validate(libai_schema()); });
  EXPECT_TRUE(contains(message,
                       "<command line>: key 'train.dist.tensor_parallel_size': out of "
                       "range: expected an integer >= 1, or null, got 0"))
      << message;
}

TEST(Schema, MountedSectionsAreChecked) {
  Schema schema = Schema::map().key("train", Schema::map().key("seed", Schema::integer()));
  schema.mount("train.data", Schema::map().key("seq_length", Schema::integer().min(1)));
  schema.mount("extra.deep.section", Schema::boolean());
  EXPECT_NE(schema.find_path("train.data.seq_length"), nullptr);
  EXPECT_TRUE(schema.find_path("extra")->is_open());
  const Config cfg = Config::parse("train: {data: {seq_length: 0}}\n");
  EXPECT_TRUE(contains(error_message<InvalidArgument>([&] { cfg.validate(schema); }),
                       "key 'train.data.seq_length': out of range"));
}

TEST(Schema, RegisteredSectionJoinsTheProjectSchema) {
  // A later module registers its section; the process-wide schema then checks it.
  static SchemaRegistration test_section("train.test_only_section",
                                         Schema::map().key("depth", Schema::integer().min(1)));
  EXPECT_NE(libai_schema().find_path("train.test_only_section.depth"), nullptr);
  EXPECT_TRUE(contains(problem_of("train: {test_only_section: {depth: 0}}\n"), "got 0"));
  EXPECT_NE(libai_schema().find_path("train.dist.tensor_parallel_size"), nullptr);
}

}  // namespace
}  // namespace libai::config
