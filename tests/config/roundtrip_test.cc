// write_resolved() and reloading give back the same values.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "runtime/config/config.h"
#include "runtime/config/emit.h"
#include "app/schema.h"
#include "tests/config/test_files.h"

namespace libai::config {
namespace {

TEST(RoundTrip, WriteResolvedThenReloadGivesTheSameValues) {
  testing::TempDir dir;
  const std::string path =
      dir.write("job.yaml",
                "model:\n  name: gpt2\n  tricky: ['1.0', 'true', 'null', 'a: b', '#x', '', ' pad', "
                "\"q\\\"\"]\n"
                "  numbers: [1, 1.0, 1e-8, -0.5, 12345678901, .inf]\n"
                "  nested: {list_of_maps: [{a: 1}, {b: [2, 3]}], empty_map: {}, empty_list: []}\n"
                "train: {seed: 7, global_batch_size: null}\n");
  const Config original = Config::load(path, {"train.seed=8", "+model.stages=[0,0,1,1]"});
  const std::string written = write_resolved(original, dir.file("out/run1"));
  EXPECT_EQ(written, dir.file("out/run1") + "/config.yaml");
  const Config reloaded = Config::load(written);
  EXPECT_EQ(reloaded.root(), original.root()) << reloaded.to_yaml();
  EXPECT_EQ(reloaded.get<int>("train.seed"), 8);
  EXPECT_EQ(reloaded.get_list<std::string>("model.tricky"),
            (std::vector<std::string>{"1.0", "true", "null", "a: b", "#x", "", " pad", "q\""}));
  EXPECT_TRUE(std::isinf(reloaded.get_list<double>("model.numbers").back()));
}

TEST(RoundTrip, DefaultConfigSurvivesWriting) {
  testing::TempDir dir;
  const Config original =
      load_libai_config(LIBAI_SOURCE_DIR "/configs/default.yaml", {"train.amp.enabled=true"});
  const Config reloaded = Config::load(write_resolved(original, dir.path()));
  EXPECT_EQ(reloaded.root(), original.root());
  EXPECT_NO_THROW(reloaded.validate(libai_schema()));
}

TEST(RoundTrip, FloatsKeepTheirType) {
  const Config cfg = Config::parse("a: 1.0\nb: 0.0001\nc: 3\n");
  const Config again = Config::parse(cfg.to_yaml());
  EXPECT_EQ(again.node("a").kind(), Node::Kind::floating);
  EXPECT_EQ(again.node("c").kind(), Node::Kind::integer);
  EXPECT_DOUBLE_EQ(again.get<double>("b"), 1e-4);
}

TEST(RoundTrip, JsonKeepsOrderAndTypes) {
  const Config cfg = Config::parse("b: 1\na: [true, null, 'x', 1.5]\n");
  EXPECT_EQ(cfg.to_json(-1), R"({"b":1,"a":[true,null,"x",1.5]})");
}

// tests/fuzz/corpus/fuzz_config/invalid_utf8_to_json: a config with a byte that is not UTF-8
// was read, then to_json (config.json of a checkpoint) threw nlohmann's type_error, which is no
// libai::Error and named no key. The reader now refuses such bytes where they are.
TEST(RoundTrip, BytesThatAreNotUtf8AreRefusedWhereTheyAre) {
  auto refusal = [](const std::string& yaml) {
    try {
      (void)Config::parse(yaml, "job.yaml");
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal("model:\n  name: gp\xfft2\n"), "job.yaml:2:9: not UTF-8 (byte 0xFF at offset 2)");
  EXPECT_NE(refusal("model: {\"k\xc3\": 1}\n").find("not UTF-8 (byte 0xC3 at offset 1)"),
            std::string::npos);                                // a truncated sequence, in a key
  EXPECT_NE(refusal("a: \xc0\xaf\n").find("not UTF-8"), std::string::npos);  // overlong '/'
  EXPECT_NE(refusal("a: \xed\xa0\x80\n").find("not UTF-8"), std::string::npos);  // a surrogate
  EXPECT_NE(refusal("a: \xf4\x90\x80\x80\n").find("not UTF-8"), std::string::npos);  // > U+10FFFF
  // Well-formed text of every length, up to U+10FFFF, reads and writes as JSON.
  const Config ok = Config::parse("a: \"caf\xc3\xa9 \xe2\x82\xac \xf4\x8f\xbf\xbf\"\n", "job.yaml");
  EXPECT_EQ(ok.get<std::string>("a"), "caf\xc3\xa9 \xe2\x82\xac \xf4\x8f\xbf\xbf");
  EXPECT_NE(ok.to_json().find("caf\xc3\xa9"), std::string::npos);
}

}  // namespace
}  // namespace libai::config
