// Schemas: what keys a config section has, their types and their ranges.
//
//   Schema dist = Schema::map()
//       .key("tensor_parallel_size", Schema::integer().min(1))
//       .key("custom_pipeline_stage_id", Schema::list_of(Schema::integer().min(0)).nullable())
//       .key("balance", Schema::one_of({"uniform", "measured", "memory"}));
//   dist.validate(root.at("train.dist"));   // throws InvalidArgument naming file:line:column,
//                                           // the key path and the bad value
//
// A map is closed by default (an unknown key is an error with a did-you-mean); `.open()`
// accepts any extra keys, for sections whose contents another module owns. Keys are optional
// unless `.required()`: the shipped configs/common files supply the values.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/config/node.h"

namespace libai::config {

class Schema {
 public:
  enum class Type { any, boolean, integer, floating, string, enumeration, list, map };

  static Schema any();
  static Schema boolean();
  static Schema integer();
  static Schema floating();  // accepts integers too: `lr: 1` is a valid float
  static Schema string();
  static Schema one_of(std::vector<std::string> choices);
  static Schema list_of(Schema item);
  static Schema map();

  // Bounds for numbers (inclusive, or exclusive with greater_than), lengths for lists.
  Schema& min(double bound);
  Schema& max(double bound);
  Schema& greater_than(double bound);
  Schema& less_than(double bound);
  Schema& min_items(std::size_t count);
  Schema& max_items(std::size_t count);
  Schema& nullable(bool value = true);
  Schema& required(bool value = true);
  Schema& open(bool value = true);
  Schema& doc(std::string text);

  // Adds or replaces a field of a map schema.
  Schema& key(const std::string& name, Schema field);
  // Installs `field` at a dotted path below this map ("train.data"), creating open maps for
  // missing intermediate sections. This is how a later module registers its sub-schema.
  void mount(std::string_view dotted, Schema field);

  Type type() const { return type_; }
  bool is_nullable() const { return nullable_; }
  bool is_required() const { return required_; }
  bool is_open() const { return open_; }
  const std::string& documentation() const { return doc_; }
  const std::vector<std::pair<std::string, Schema>>& fields() const { return fields_; }
  const Schema* field(std::string_view name) const;
  // The schema of a dotted path below this one, or nullptr (also inside open maps).
  const Schema* find_path(std::string_view dotted) const;
  const std::vector<std::string>& choices() const { return choices_; }

  // Every problem found, one message each ("file:line:col: key 'a.b': expected ...").
  std::vector<std::string> check(const Node& node) const;
  // Throws InvalidArgument with the first problem, and how many more there are.
  void validate(const Node& node) const;

  // "an integer >= 1", "one of uniform, measured, memory", "a list of integers >= 0".
  std::string expectation() const;

 private:
  explicit Schema(Type type) : type_(type) {}
  void check_into(const Node& node, std::vector<std::string>& problems) const;
  bool check_number(const Node& node, std::vector<std::string>& problems) const;

  Type type_ = Type::any;
  bool nullable_ = false;
  bool required_ = false;
  bool open_ = false;
  std::string doc_;
  std::optional<double> min_, max_, greater_than_, less_than_;
  std::optional<std::size_t> min_items_, max_items_;
  std::vector<std::string> choices_;
  std::vector<Schema> item_;  // the one item schema of a list (a vector: Schema is incomplete)
  std::vector<std::pair<std::string, Schema>> fields_;
};

}  // namespace libai::config
