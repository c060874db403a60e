// _base_ inheritance, overrides and the errors of malformed input.
#include <gtest/gtest.h>

#include "runtime/config/config.h"
#include "runtime/config/yaml_reader.h"
#include "tests/config/test_files.h"

namespace libai::config {
namespace {

using testing::error_message;
using testing::TempDir;

TEST(Yaml, ScalarsAreTypedByTheCoreSchema) {
  const Config cfg = Config::parse(
      "a: 3\nb: 1.5\nc: 1e-4\nd: true\ne: null\nf: ~\ng: '3'\nh: bf16\ni: [0, 0, 1]\nj: -7\n"
      "k: 0x10\nl:\n");
  EXPECT_EQ(cfg.root().at("a").kind(), Node::Kind::integer);
  EXPECT_EQ(cfg.get<int>("a"), 3);
  EXPECT_DOUBLE_EQ(cfg.get<double>("b"), 1.5);
  EXPECT_DOUBLE_EQ(cfg.get<double>("c"), 1e-4);
  EXPECT_EQ(cfg.root().at("c").kind(), Node::Kind::floating);
  EXPECT_TRUE(cfg.get<bool>("d"));
  EXPECT_TRUE(cfg.node("e").is_null());
  EXPECT_TRUE(cfg.node("f").is_null());
  EXPECT_TRUE(cfg.node("l").is_null());
  EXPECT_EQ(cfg.get<std::string>("g"), "3");  // quoted: a string, never a number
  EXPECT_EQ(cfg.get<std::string>("h"), "bf16");
  EXPECT_EQ(cfg.get_list<int>("i"), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(cfg.get<int>("j"), -7);
  EXPECT_EQ(cfg.get<int>("k"), 16);
}

TEST(Yaml, EveryValueKnowsFileLineAndColumn) {
  TempDir dir;
  const std::string path = dir.write("a.yaml", "train:\n  dist:\n    tensor_parallel_size: 2\n");
  const Config cfg = Config::load(path);
  const Node& tp = cfg.node("train.dist.tensor_parallel_size");
  EXPECT_EQ(tp.location().str(), path + ":3:27");
  EXPECT_EQ(tp.path(), "train.dist.tensor_parallel_size");
}

TEST(Yaml, MalformedYamlNamesItsLine) {
  TempDir dir;
  const std::string path = dir.write("bad.yaml", "train:\n  seed: 1\n  dist: [1, 2\n  x: 3\n");
  const std::string message = error_message<CorruptInput>([&] { Config::load(path); });
  EXPECT_NE(message.find(path + ":"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed YAML"), std::string::npos) << message;
  // The error is at or after the unclosed list on line 3, never before it.
  const std::size_t colon = message.find(':', path.size());
  EXPECT_GE(std::stoi(message.substr(colon + 1)), 3) << message;
}

TEST(Yaml, DuplicateKeysAreAnError) {
  const std::string message = error_message<InvalidArgument>(
      [] { Config::parse("train:\n  seed: 1\n  seed: 2\n", "dup.yaml"); });
  EXPECT_NE(message.find("dup.yaml:3:3: duplicate key 'seed'"), std::string::npos) << message;
}

TEST(Yaml, MissingFileIsNotFound) {
  const std::string message = error_message<NotFound>([] { Config::load("no/such/file.yaml"); });
  EXPECT_NE(message.find("no/such/file.yaml"), std::string::npos) << message;
}

TEST(Inheritance, BasesMergeInOrderThenTheFileOnTop) {
  TempDir dir;
  dir.write("common/train.yaml",
            "train:\n  seed: 1\n  log_period: 20\n  dist: {tensor_parallel_size: 1, "
            "pipeline_parallel_size: 1}\n");
  dir.write("common/more.yaml", "train:\n  seed: 2\n  dist: {pipeline_parallel_size: 4}\n");
  const std::string job =
      dir.write("jobs/job.yaml",
                "_base_: [../common/train.yaml, ../common/more.yaml]\ntrain:\n  dist:\n"
                "    tensor_parallel_size: 8\n");
  const Config cfg = Config::load(job);
  EXPECT_EQ(cfg.get<int>("train.seed"), 2);                         // later base wins
  EXPECT_EQ(cfg.get<int>("train.log_period"), 20);                  // kept from the first
  EXPECT_EQ(cfg.get<int>("train.dist.pipeline_parallel_size"), 4);  // deep merge
  EXPECT_EQ(cfg.get<int>("train.dist.tensor_parallel_size"), 8);    // the file's own on top
  EXPECT_FALSE(cfg.has("_base_"));
  // Locations survive merging: each value points at the file that set it.
  EXPECT_EQ(cfg.node("train.log_period").location().file, dir.file("common/train.yaml"));
  EXPECT_EQ(cfg.node("train.dist.tensor_parallel_size").location().file, job);
}

TEST(Inheritance, SingleStringBaseAndConfigsRoot) {
  TempDir dir;
  dir.write("configs/common/train.yaml", "train: {seed: 5, log_period: 1}\n");
  // `common/train.yaml` is not next to the job: it resolves against the enclosing configs/.
  const std::string job =
      dir.write("configs/jobs/gpt/job.yaml", "_base_: common/train.yaml\ntrain: {log_period: 3}\n");
  const Config cfg = Config::load(job);
  EXPECT_EQ(cfg.get<int>("train.seed"), 5);
  EXPECT_EQ(cfg.get<int>("train.log_period"), 3);
}

TEST(Inheritance, SearchPathsResolveBases) {
  TempDir dir;
  dir.write("shared/base.yaml", "graph: {enabled: false}\n");
  const std::string job = dir.write("elsewhere/job.yaml", "_base_: [base.yaml]\n");
  LoadOptions options;
  options.search_paths.push_back(dir.file("shared"));
  EXPECT_FALSE(Config::load(job, {}, options).get<bool>("graph.enabled"));
}

TEST(Inheritance, DeleteReplacesInsteadOfMerging) {
  TempDir dir;
  dir.write("base.yaml", "model: {hidden: 8, layers: 2}\n");
  const std::string job =
      dir.write("job.yaml", "_base_: base.yaml\nmodel: {_delete_: true, x: 1}\n");
  const Config cfg = Config::load(job);
  EXPECT_FALSE(cfg.has("model.hidden"));
  EXPECT_FALSE(cfg.has("model._delete_"));
  EXPECT_EQ(cfg.get<int>("model.x"), 1);
}

TEST(Inheritance, MissingBaseFileNamesTheEntry) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", "# a job\n_base_: [common/nope.yaml]\n");
  const std::string message = error_message<NotFound>([&] { Config::load(job); });
  EXPECT_NE(message.find(job + ":2:10: _base_ file 'common/nope.yaml' not found"),
            std::string::npos)
      << message;
}

TEST(Inheritance, CycleIsAnError) {
  TempDir dir;
  dir.write("a.yaml", "_base_: b.yaml\nx: 1\n");
  dir.write("b.yaml", "_base_: c.yaml\n");
  dir.write("c.yaml", "_base_: a.yaml\n");
  const std::string message =
      error_message<InvalidArgument>([&] { Config::load(dir.file("a.yaml")); });
  EXPECT_NE(message.find("_base_ cycle"), std::string::npos) << message;
  EXPECT_NE(message.find("c.yaml:1:9"), std::string::npos) << message;
  EXPECT_NE(message.find("a.yaml -> "), std::string::npos) << message;
}

TEST(Inheritance, DiamondIsNotACycle) {
  TempDir dir;
  dir.write("root.yaml", "x: 1\n");
  dir.write("left.yaml", "_base_: root.yaml\ny: 2\n");
  dir.write("right.yaml", "_base_: root.yaml\nz: 3\n");
  const Config cfg = Config::load(dir.write("job.yaml", "_base_: [left.yaml, right.yaml]\n"));
  EXPECT_EQ(cfg.get<int>("x") + cfg.get<int>("y") + cfg.get<int>("z"), 6);
}

TEST(Inheritance, BaseMustBeFileNames) {
  const std::string message =
      error_message<InvalidArgument>([] { Config::parse("_base_: {a: 1}\n", "j.yaml"); });
  EXPECT_NE(message.find("j.yaml:1:9: _base_ must be a file name"), std::string::npos) << message;
}

}  // namespace
}  // namespace libai::config
