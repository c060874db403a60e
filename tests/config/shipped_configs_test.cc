// Every config shipped under configs/ loads, resolves its _base_ files and validates, so the
// schema in libai_schema.cc and the YAML files cannot drift apart.
#include <gtest/gtest.h>

#include <filesystem>

#include "app/schema.h"

namespace libai::config {
namespace {

namespace fs = std::filesystem;

TEST(ShippedConfigs, AllValidate) {
  const fs::path root = fs::path(LIBAI_SOURCE_DIR) / "configs";
  int count = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".yaml") continue;
    ++count;
    EXPECT_NO_THROW({
      try {
        load_libai_config(entry.path().string());
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
        throw;
      }
    }) << entry.path();
  }
  EXPECT_GE(count, 4);
}

TEST(ShippedConfigs, DefaultHasLibaiKeysAndValues) {
  const Config cfg = load_libai_config(LIBAI_SOURCE_DIR "/configs/default.yaml");
  EXPECT_EQ(cfg.get<int>("train.dist.tensor_parallel_size"), 1);
  EXPECT_EQ(cfg.get<std::string>("train.dist.balance"), "uniform");
  EXPECT_EQ(cfg.get<std::optional<int>>("train.global_batch_size"), std::nullopt);
  EXPECT_EQ(cfg.get<std::string>("optim._target_"), "adamw");
  EXPECT_EQ(cfg.get_list<double>("optim.betas"), (std::vector<double>{0.9, 0.999}));
  EXPECT_TRUE(cfg.get<bool>("graph.enabled"));
  EXPECT_EQ(cfg.get<std::string>("job._target_"), "train");
  EXPECT_TRUE(cfg.node("model").is_map());
}

TEST(ShippedConfigs, EveryKeyOfTheSchemaIsInTheDefaults) {
  // A key added to the schema needs its default in configs/common, and the reverse.
  const Config cfg = load_libai_config(LIBAI_SOURCE_DIR "/configs/default.yaml");
  const Schema schema = libai_schema();
  std::vector<std::string> missing;
  const auto walk = [&](auto&& self, const Schema& section, const std::string& path) -> void {
    for (const auto& [name, field] : section.fields()) {
      const std::string key = path.empty() ? name : path + "." + name;
      if (key.find("test_only") != std::string::npos) continue;
      if (field.is_alias()) {
        // A shorthand never survives loading: its value lives under the full key.
        EXPECT_FALSE(cfg.has(key)) << key << " is an alias of " << field.alias_target();
        EXPECT_TRUE(cfg.has(field.alias_target())) << field.alias_target();
        continue;
      }
      if (!cfg.has(key)) missing.push_back(key);
      if (field.type() == Schema::Type::map && !field.is_open()) self(self, field, key);
    }
  };
  walk(walk, schema, "");
  EXPECT_TRUE(missing.empty()) << "schema keys without a default: "
                               << ::testing::PrintToString(missing);
}

}  // namespace
}  // namespace libai::config
