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
//
//   Schema::satisfying("2 or inf", [](const Node& v) { return is_norm_order(v); });
//   Schema::floating().alias_of("optim.params.clip_grad_max_norm");   // a shorthand key
//
// `satisfying` is for values no single type describes. An alias is a second name for a key:
// the loader moves its value to the full key (canonicalize_aliases in runtime/config/config.h),
// so the resolved config only holds the full key.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/config/node.h"

namespace libai::config {

class Schema {
 public:
  enum class Type { any, boolean, integer, floating, string, enumeration, list, map, custom };

  static Schema any();
  static Schema boolean();
  static Schema integer();
  static Schema floating();  // accepts integers too: `lr: 1` is a valid float
  static Schema string();
  static Schema one_of(std::vector<std::string> choices);
  static Schema list_of(Schema item);
  static Schema map();
  // A value `accepts` returns true for; `expectation` says which ("2 or inf").
  static Schema satisfying(std::string expectation, std::function<bool(const Node&)> accepts);

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
  // For an open map: the schema of every value whose key is not a named field.
  Schema& values(Schema value);
  Schema& doc(std::string text);
  // This key is a shorthand for the key at the dotted path `full` (from the root).
  Schema& alias_of(std::string full);

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
  bool is_alias() const { return !alias_of_.empty(); }
  const std::string& alias_target() const { return alias_of_; }
  const std::vector<std::pair<std::string, Schema>>& fields() const { return fields_; }
  const Schema* field(std::string_view name) const;
  // The schema of a dotted path below this one, or nullptr (also inside open maps).
  const Schema* find_path(std::string_view dotted) const;
  const std::vector<std::string>& choices() const { return choices_; }

  // Every problem found, one message each ("file:line:col: key 'a.b': expected ...").
  std::vector<std::string> check(const Node& node) const;
  // Throws InvalidArgument listing every problem, one a line.
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
  std::string alias_of_;
  std::string custom_expectation_;
  std::function<bool(const Node&)> accepts_;
  std::optional<double> min_, max_, greater_than_, less_than_;
  std::optional<std::size_t> min_items_, max_items_;
  std::vector<std::string> choices_;
  // The one item schema of a list, or of an open map's other values (a vector: Schema is
  // incomplete here).
  std::vector<Schema> item_;
  std::vector<std::pair<std::string, Schema>> fields_;
};

}  // namespace libai::config
