#include "runtime/config/schema.h"

#include <cmath>

#include "runtime/config/suggest.h"
#include "runtime/error.h"

namespace libai::config {

Schema Schema::any() { return Schema(Type::any); }
Schema Schema::boolean() { return Schema(Type::boolean); }
Schema Schema::integer() { return Schema(Type::integer); }
Schema Schema::floating() { return Schema(Type::floating); }
Schema Schema::string() { return Schema(Type::string); }
Schema Schema::map() { return Schema(Type::map); }

Schema Schema::satisfying(std::string expectation, std::function<bool(const Node&)> accepts) {
  Schema schema(Type::custom);
  schema.custom_expectation_ = std::move(expectation);
  schema.accepts_ = std::move(accepts);
  return schema;
}

Schema Schema::one_of(std::vector<std::string> choices) {
  Schema schema(Type::enumeration);
  schema.choices_ = std::move(choices);
  return schema;
}

Schema Schema::list_of(Schema item) {
  Schema schema(Type::list);
  schema.item_.push_back(std::move(item));
  return schema;
}

Schema& Schema::min(double bound) { return min_ = bound, *this; }
Schema& Schema::max(double bound) { return max_ = bound, *this; }
Schema& Schema::greater_than(double bound) { return greater_than_ = bound, *this; }
Schema& Schema::less_than(double bound) { return less_than_ = bound, *this; }
Schema& Schema::min_items(std::size_t count) { return min_items_ = count, *this; }
Schema& Schema::max_items(std::size_t count) { return max_items_ = count, *this; }
Schema& Schema::nullable(bool value) { return nullable_ = value, *this; }
Schema& Schema::required(bool value) { return required_ = value, *this; }
Schema& Schema::open(bool value) { return open_ = value, *this; }
Schema& Schema::values(Schema value) {
  LIBAI_ASSERT(type_ == Type::map, "Schema::values on a schema that is not a map");
  item_.assign(1, std::move(value));
  return *this;
}
Schema& Schema::doc(std::string text) { return doc_ = std::move(text), *this; }
Schema& Schema::alias_of(std::string full) { return alias_of_ = std::move(full), *this; }

Schema& Schema::key(const std::string& name, Schema field) {
  LIBAI_ASSERT(type_ == Type::map, "Schema::key on a schema that is not a map: ", name);
  for (auto& [existing, schema] : fields_) {
    if (existing == name) {
      schema = std::move(field);
      return *this;
    }
  }
  fields_.emplace_back(name, std::move(field));
  return *this;
}

void Schema::mount(std::string_view dotted, Schema field) {
  const std::vector<std::string> pieces = split_path(dotted, "schema path");
  Schema* section = this;
  for (std::size_t i = 0; i + 1 < pieces.size(); ++i) {
    LIBAI_CHECK(section->type_ == Type::map, "cannot mount a schema at '", dotted, "': '",
                pieces[i], "' is not a map");
    if (section->field(pieces[i]) == nullptr) section->key(pieces[i], Schema::map().open());
    section = const_cast<Schema*>(section->field(pieces[i]));
  }
  LIBAI_CHECK(section->type_ == Type::map, "cannot mount a schema at '", dotted,
              "': its parent is not a map");
  section->key(pieces.back(), std::move(field));
}

const Schema* Schema::field(std::string_view name) const {
  for (const auto& [existing, schema] : fields_)
    if (existing == name) return &schema;
  return nullptr;
}

const Schema* Schema::find_path(std::string_view dotted) const {
  const Schema* schema = this;
  for (const std::string& piece : split_path(dotted, "key path")) {
    schema = schema->field(piece);
    if (schema == nullptr) return nullptr;
  }
  return schema;
}

namespace {

std::string bound_text(double bound) {
  if (std::floor(bound) == bound && std::fabs(bound) < 1e15)
    return std::to_string(static_cast<int64_t>(bound));
  return format_float(bound);
}

}  // namespace

std::string Schema::expectation() const {
  std::string text;
  switch (type_) {
    case Type::any: text = "any value"; break;
    case Type::boolean: text = "a boolean (true or false)"; break;
    case Type::integer: text = "an integer"; break;
    case Type::floating: text = "a number"; break;
    case Type::string: text = "a string"; break;
    case Type::enumeration: text = "one of " + join_names(choices_); break;
    case Type::map: text = "a map"; break;
    case Type::custom: text = custom_expectation_; break;
    case Type::list: {
      text = "a list";
      if (min_items_ && max_items_ && *min_items_ == *max_items_) {
        text += str_cat(" of ", *min_items_);
      } else {
        if (min_items_) text += str_cat(" of at least ", *min_items_);
        if (max_items_) text += str_cat(min_items_ ? " and" : " of", " at most ", *max_items_);
      }
      std::string item = item_[0].expectation();
      // "an integer >= 0" -> "integers >= 0" reads better inside "a list of ...".
      if (item.rfind("an integer", 0) == 0) item = "integers" + item.substr(10);
      if (item.rfind("a number", 0) == 0) item = "numbers" + item.substr(8);
      if (item.rfind("a string", 0) == 0) item = "strings" + item.substr(8);
      text += (min_items_ || max_items_ ? " items, each " : " of ") + item;
      break;
    }
  }
  // An interval when both ends are bounded: "in [0, 1)"; else one comparison: "> 0".
  const bool has_lower = min_ || greater_than_, has_upper = max_ || less_than_;
  if (has_lower && has_upper) {
    text += min_ ? " in [" + bound_text(*min_) : " in (" + bound_text(*greater_than_);
    text += max_ ? ", " + bound_text(*max_) + "]" : ", " + bound_text(*less_than_) + ")";
  } else {
    if (min_) text += " >= " + bound_text(*min_);
    if (greater_than_) text += " > " + bound_text(*greater_than_);
    if (max_) text += " <= " + bound_text(*max_);
    if (less_than_) text += " < " + bound_text(*less_than_);
  }
  if (nullable_) text += ", or null";
  return text;
}

bool Schema::check_number(const Node& node, std::vector<std::string>& problems) const {
  const double value = node.as_float();
  const bool in_range = (!min_ || value >= *min_) && (!max_ || value <= *max_) &&
                        (!greater_than_ || value > *greater_than_) &&
                        (!less_than_ || value < *less_than_);
  if (!in_range)
    problems.push_back(node.describe() + ": out of range: expected " + expectation() + ", got " +
                       node.repr());
  return in_range;
}

void Schema::check_into(const Node& node, std::vector<std::string>& problems) const {
  const auto wrong_type = [&] {
    problems.push_back(node.describe() + ": wrong type: expected " + expectation() + ", got " +
                       node.repr() + " (" + kind_name(node.kind()) + ")");
  };
  if (node.is_null()) {
    if (!nullable_ && type_ != Type::any) wrong_type();
    return;
  }
  switch (type_) {
    case Type::any: return;
    case Type::custom:
      if (!accepts_(node))
        problems.push_back(node.describe() + ": expected " + expectation() + ", got " +
                           node.repr());
      return;
    case Type::boolean:
      if (node.kind() != Node::Kind::boolean) wrong_type();
      return;
    case Type::integer:
      if (node.kind() != Node::Kind::integer) return wrong_type();
      check_number(node, problems);
      return;
    case Type::floating:
      if (node.kind() != Node::Kind::integer && node.kind() != Node::Kind::floating)
        return wrong_type();
      check_number(node, problems);
      return;
    case Type::string:
      if (node.kind() != Node::Kind::string) wrong_type();
      return;
    case Type::enumeration: {
      if (node.kind() != Node::Kind::string) return wrong_type();
      for (const std::string& choice : choices_)
        if (choice == node.as_string()) return;
      problems.push_back(node.describe() + ": expected " + expectation() + ", got " + node.repr() +
                         did_you_mean(node.as_string(), choices_));
      return;
    }
    case Type::list: {
      if (!node.is_list()) return wrong_type();
      const std::size_t count = node.items().size();
      if ((min_items_ && count < *min_items_) || (max_items_ && count > *max_items_)) {
        problems.push_back(node.describe() + ": expected " + expectation() + ", got " +
                           node.repr() + str_cat(" (", count, " items)"));
      }
      for (const Node& item : node.items()) item_[0].check_into(item, problems);
      return;
    }
    case Type::map: {
      if (!node.is_map()) return wrong_type();
      std::vector<std::string> known;
      for (const auto& [name, schema] : fields_) known.push_back(name);
      for (const auto& [name, value] : node.entries()) {
        if (const Schema* schema = field(name)) {
          schema->check_into(value, problems);
        } else if (!item_.empty()) {
          item_[0].check_into(value, problems);
        } else if (!open_) {
          // A map or list is reported at its key: a block one starts on the next line (its
          // own location is its first entry's). A scalar is reported where its value is.
          const bool at_key =
              (value.is_map() || value.is_list()) && !value.key_location().file.empty();
          const Location& at = at_key ? value.key_location() : value.location();
          const std::string where = at.file.empty() ? "" : at.str() + ": ";
          problems.push_back(where + "unknown key '" + join_path(node.path(), name) + "'" +
                             did_you_mean(name, known));
        }
      }
      for (const auto& [name, schema] : fields_) {
        if (schema.required_ && node.find(name) == nullptr)
          problems.push_back(node.describe() + ": missing required key '" + name + "'");
      }
      return;
    }
  }
}

std::vector<std::string> Schema::check(const Node& node) const {
  std::vector<std::string> problems;
  check_into(node, problems);
  return problems;
}

void Schema::validate(const Node& node) const {
  const std::vector<std::string> problems = check(node);
  if (problems.empty()) return;
  if (problems.size() == 1) LIBAI_THROW(InvalidArgument, problems.front());
  std::string message = str_cat(problems.size(), " problems in the config:");
  for (const std::string& problem : problems) message += "\n  " + problem;
  LIBAI_THROW(InvalidArgument, message);
}

}  // namespace libai::config
