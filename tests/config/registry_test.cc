// `_target_` instantiation through a small test-only registry.
#include <gtest/gtest.h>

#include "runtime/config/config.h"
#include "runtime/config/registry.h"
#include "tests/config/test_files.h"

namespace libai::config {
namespace {

using testing::error_message;

struct Shape {
  virtual ~Shape() = default;
  virtual double area() const = 0;
};

struct Square : Shape {
  explicit Square(const Node& cfg) : side(cfg.at("side").as<double>()) {}
  double area() const override { return side * side; }
  double side;
};

struct Circle : Shape {
  explicit Circle(const Node& cfg) : radius(cfg.at("radius").as<double>()) {}
  double area() const override { return 3.0 * radius * radius; }
  double radius;
};

Registration<Shape> square("square", [](const Node& cfg) { return std::make_unique<Square>(cfg); });
Registration<Shape> circle("circle", [](const Node& cfg) { return std::make_unique<Circle>(cfg); });

TEST(Registry, BuildsTheNamedTarget) {
  const Config cfg = Config::parse("shape: {_target_: square, side: 3}\n");
  std::unique_ptr<Shape> shape = instantiate<Shape>(cfg.node("shape"));
  EXPECT_DOUBLE_EQ(shape->area(), 9.0);
  EXPECT_EQ(Registry<Shape>::global().names(), (std::vector<std::string>{"circle", "square"}));
}

TEST(Registry, UnknownTargetListsKnownNamesWithDidYouMean) {
  const Config cfg = Config::parse("shape:\n  _target_: sqare\n", "shapes.yaml");
  const std::string message =
      error_message<NotFound>([&] { instantiate<Shape>(cfg.node("shape")); });
  EXPECT_NE(message.find("shapes.yaml:2:13: key 'shape._target_': unknown target 'sqare' (did you "
                         "mean 'square'?); known targets: circle, square"),
            std::string::npos)
      << message;
}

TEST(Registry, FactoryErrorsNameTheKey) {
  const Config cfg = Config::parse("shape: {_target_: circle, radius: big}\n", "s.yaml");
  const std::string message =
      error_message<InvalidArgument>([&] { instantiate<Shape>(cfg.node("shape")); });
  EXPECT_NE(message.find("key 'shape.radius': expected a number"), std::string::npos) << message;
}

TEST(Registry, SectionWithoutTargetIsAnError) {
  const Config cfg = Config::parse("shape: {side: 1}\n");
  EXPECT_NE(error_message<InvalidArgument>([&] {
              instantiate<Shape>(cfg.node("shape"));
            }).find("expected a map with a '_target_' key"),
            std::string::npos);
}

TEST(Registry, LocalRegistryIsSeparate) {
  Registry<Shape> local;
  local.add("unit", [](const Node&) {
    Node n = Node::map();
    n.set("side", Node::integer(1));
    return std::make_unique<Square>(n);
  });
  EXPECT_TRUE(local.contains("unit"));
  EXPECT_FALSE(local.contains("square"));
  const Config cfg = Config::parse("shape: {_target_: unit}\n");
  EXPECT_DOUBLE_EQ(local.instantiate(cfg.node("shape"))->area(), 1.0);
}

}  // namespace
}  // namespace libai::config
