// A config value tree that remembers where every value came from.
//
//   Node root = parse_yaml_file("configs/default.yaml");
//   const Node& tp = root.at("train.dist.tensor_parallel_size");
//   int n = tp.as<int>();                     // error names file:line:column and the key path
//   std::string where = tp.location().str();  // "configs/common/train.yaml:17:27"
//
// Scalars are typed when read (YAML 1.2 core rules: null, true/false, integers, floats; a
// quoted scalar is always a string), so a value keeps its type through merging, overrides and
// writing. Maps keep their keys in file order so a resolved config reads like its sources.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace libai::config {

// Where a value was written: a file position, or the command line for overrides.
struct Location {
  std::string file;  // "<command line>" for overrides, "" when unknown
  int line = 0;      // 1-based; 0 when the source has no lines
  int column = 0;    // 1-based

  std::string str() const;
  static Location command_line() { return {"<command line>", 0, 0}; }
};

class Node {
 public:
  enum class Kind { null, boolean, integer, floating, string, list, map };
  using Entry = std::pair<std::string, Node>;

  Node() = default;  // null
  static Node null(Location where = {});
  static Node boolean(bool value, Location where = {});
  static Node integer(int64_t value, Location where = {});
  static Node floating(double value, Location where = {});
  static Node string(std::string value, Location where = {});
  static Node list(Location where = {});
  static Node map(Location where = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_map() const { return kind_ == Kind::map; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_scalar() const { return kind_ != Kind::list && kind_ != Kind::map; }
  const Location& location() const { return location_; }
  void set_location(Location where) { location_ = std::move(where); }
  // Where the key naming this value was written, for a value in a map read from a file (a
  // block map's own location is its first entry's, a line below its key); else empty.
  const Location& key_location() const { return key_location_; }
  void set_key_location(Location where) { key_location_ = std::move(where); }

  // The dotted path from the root ("train.dist.tensor_parallel_size"); set by the loader and
  // kept up to date by set(), so error messages can name the key of any value.
  const std::string& path() const { return path_; }
  void set_path(const std::string& path);  // also renames every child

  // Raw access; throw InvalidArgument naming location, path and value on a kind mismatch.
  bool as_bool() const;
  int64_t as_int() const;
  double as_float() const;  // integers are accepted
  const std::string& as_string() const;
  const std::vector<Node>& items() const;
  std::vector<Node>& items();
  const std::vector<Entry>& entries() const;
  std::vector<Entry>& entries();

  // Typed conversion: bool, integral types, float/double, std::string, std::vector<T>,
  // std::optional<T> (null -> nullopt). Range-checked for narrow integers.
  template <typename T>
  T as() const;

  // Map access by one key; nullptr when absent or not a map.
  const Node* find(std::string_view key) const;
  Node* find(std::string_view key);
  // Inserts or replaces `key`, keeping the position of an existing key.
  Node& set(const std::string& key, Node value);
  bool erase(std::string_view key);

  // Dotted-path access relative to this node; nullptr when any piece is missing.
  const Node* find_path(std::string_view dotted) const;
  Node* find_path(std::string_view dotted);
  // Throws NotFound naming the missing piece and a did-you-mean among its siblings.
  const Node& at(std::string_view dotted) const;

  // The value as it would be written in YAML flow style, for messages: 2, "abc", [0, 1].
  std::string repr() const;
  // "key path 'train.seed' = -1 at configs/x.yaml:3:9" style prefix used in errors.
  std::string describe() const;

  // Structural equality (values and kinds; locations are ignored).
  friend bool operator==(const Node& a, const Node& b);

 private:
  Kind kind_ = Kind::null;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string string_;
  std::vector<Node> items_;
  std::vector<Entry> entries_;
  Location location_;
  Location key_location_;
  std::string path_;
};

const char* kind_name(Node::Kind kind);

// Splits "a.b.c" into pieces; an empty piece is an InvalidArgument naming `what`.
std::vector<std::string> split_path(std::string_view dotted, std::string_view what);
std::string join_path(const std::string& parent, const std::string& key);

// Shortest text that reads back as the same double and as a float ("1.0", "1.0e-05", ".inf").
std::string format_float(double value);
// A string in double quotes with YAML/JSON escapes.
std::string quote_string(std::string_view text);

// Deep merge: maps merge key by key (recursively), anything else in `overlay` replaces
// `base`. A map in the overlay holding `_delete_: true` replaces instead of merging.
void merge_into(Node& base, const Node& overlay);

}  // namespace libai::config

#include "runtime/config/node_as.h"
