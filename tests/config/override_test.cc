// Dotted command-line overrides.
#include <gtest/gtest.h>

#include "runtime/config/config.h"
#include "app/schema.h"
#include "tests/config/test_files.h"

namespace libai::config {
namespace {

using testing::error_message;

Config sample() {
  return Config::parse(
      "train:\n  seed: 1\n  dist:\n    tensor_parallel_size: 1\n    custom_pipeline_stage_id: "
      "null\n"
      "optim: {lr: 0.1}\nmodel: {}\n",
      "sample.yaml");
}

TEST(Override, SetsScalarsListsAndNull) {
  Config cfg = sample();
  cfg.apply_override("train.dist.tensor_parallel_size=2");
  cfg.apply_override("train.dist.custom_pipeline_stage_id=[0,0,1,1]");
  cfg.apply_override("optim.lr=1e-3");
  cfg.apply_override("train.seed=null");
  EXPECT_EQ(cfg.get<int>("train.dist.tensor_parallel_size"), 2);
  EXPECT_EQ(cfg.get_list<int>("train.dist.custom_pipeline_stage_id"),
            (std::vector<int>{0, 0, 1, 1}));
  EXPECT_DOUBLE_EQ(cfg.get<double>("optim.lr"), 1e-3);
  EXPECT_TRUE(cfg.node("train.seed").is_null());
  EXPECT_EQ(cfg.get_or<int>("train.seed", 42), 42);  // null falls back
}

TEST(Override, RemembersTheCommandLine) {
  Config cfg = sample();
  cfg.apply_override("train.dist.tensor_parallel_size=2");
  const Node& node = cfg.node("train.dist.tensor_parallel_size");
  EXPECT_EQ(node.location().str(), "<command line>");
  EXPECT_EQ(node.path(), "train.dist.tensor_parallel_size");
  EXPECT_EQ(cfg.node("train.seed").location().str(), "sample.yaml:2:9");
}

TEST(Override, ValueTextKeepsEqualsSigns) {
  Config cfg = sample();
  cfg.apply_override("+model.note=a=b");
  EXPECT_EQ(cfg.get<std::string>("model.note"), "a=b");
}

TEST(Override, UnknownKeyHasDidYouMean) {
  Config cfg = sample();
  const std::string message = error_message<InvalidArgument>(
      [&] { cfg.apply_override("train.dist.tensor_paralel_size=2"); });
  EXPECT_NE(message.find("unknown key 'train.dist.tensor_paralel_size'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("did you mean 'tensor_parallel_size'?"), std::string::npos) << message;
  EXPECT_NE(message.find("<command line>"), std::string::npos) << message;
}

TEST(Override, PlusAddsANewKey) {
  Config cfg = sample();
  cfg.apply_override("+train.data.path=/tmp/x");
  EXPECT_EQ(cfg.get<std::string>("train.data.path"), "/tmp/x");
}

TEST(Override, SchemaKnownAndOpenSectionKeysMayBeSet) {
  const Schema schema = libai_schema();
  Config cfg = sample();
  cfg.apply_override("train.amp.enabled=true", &schema);  // the schema knows it
  cfg.apply_override("model.hidden_size=64", &schema);    // model is an open section
  EXPECT_TRUE(cfg.get<bool>("train.amp.enabled"));
  EXPECT_EQ(cfg.get<int>("model.hidden_size"), 64);
  const std::string message =
      error_message<InvalidArgument>([&] { cfg.apply_override("train.amp.enable=1", &schema); });
  EXPECT_NE(message.find("did you mean 'enabled'?"), std::string::npos) << message;
}

TEST(Override, BadSyntaxIsAnError) {
  Config cfg = sample();
  EXPECT_NE(error_message<InvalidArgument>([&] {
              cfg.apply_override("train.seed");
            }).find("bad override 'train.seed': expected KEY=VALUE"),
            std::string::npos);
  EXPECT_NE(error_message<InvalidArgument>([&] {
              cfg.apply_override("train..seed=1");
            }).find("is not a dotted key path"),
            std::string::npos);
  EXPECT_NE(error_message<InvalidArgument>([&] {
              cfg.apply_override("=1");
            }).find("is not a dotted key path"),
            std::string::npos);
  EXPECT_NE(error_message<InvalidArgument>([&] {
              cfg.apply_override("train.seed=");
            }).find("no value after '='"),
            std::string::npos);
  EXPECT_NE(error_message<InvalidArgument>([&] {
              cfg.apply_override("train.seed=[1,2");
            }).find("not valid YAML"),
            std::string::npos);
}

TEST(Override, CannotDescendIntoAScalar) {
  Config cfg = sample();
  const std::string message =
      error_message<InvalidArgument>([&] { cfg.apply_override("train.seed.x=1"); });
  EXPECT_NE(message.find("'train.seed' is an integer, not a map"), std::string::npos) << message;
}

TEST(Override, AppliedAfterBasesByLoad) {
  testing::TempDir dir;
  dir.write("base.yaml", "train: {seed: 1, dist: {tensor_parallel_size: 1}}\n");
  const std::string job = dir.write("job.yaml", "_base_: base.yaml\ntrain: {seed: 2}\n");
  const Config cfg = Config::load(job, {"train.seed=3", "train.dist.tensor_parallel_size=4"});
  EXPECT_EQ(cfg.get<int>("train.seed"), 3);
  EXPECT_EQ(cfg.get<int>("train.dist.tensor_parallel_size"), 4);
}

TEST(Getters, MissingKeyAndWrongTypeAreClear) {
  const Config cfg = sample();
  EXPECT_FALSE(cfg.has("train.sed"));
  EXPECT_TRUE(cfg.has("train.seed"));
  const std::string missing = error_message<NotFound>([&] { cfg.get<int>("train.sed"); });
  EXPECT_NE(missing.find("no key 'train.sed'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("did you mean 'seed'?"), std::string::npos) << missing;
  const std::string wrong =
      error_message<InvalidArgument>([&] { cfg.get<std::string>("train.seed"); });
  EXPECT_NE(wrong.find("sample.yaml:2:9: key 'train.seed': expected a string, got 1"),
            std::string::npos)
      << wrong;
  EXPECT_EQ(cfg.get_or<int>("train.nothing", 9), 9);
  EXPECT_EQ(cfg.get<std::optional<int>>("train.dist.custom_pipeline_stage_id"), std::nullopt);
  const std::string narrow = error_message<InvalidArgument>(
      [] { Config::parse("x: 5000000000\n", "n.yaml").get<int>("x"); });
  EXPECT_NE(narrow.find("does not fit"), std::string::npos) << narrow;
}

}  // namespace
}  // namespace libai::config
