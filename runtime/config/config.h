// Loading a config: `_base_` inheritance, command-line overrides, typed getters.
//
//   Config cfg = Config::load("configs/jobs/gpt2.yaml", {"train.dist.tensor_parallel_size=2"});
//   cfg.validate(libai_schema());                          // see libai_schema.h
//   int tp = cfg.get<int>("train.dist.tensor_parallel_size");
//   auto gbs = cfg.get<std::optional<int>>("train.global_batch_size");   // null -> nullopt
//   int log_period = cfg.get_or<int>("train.log_period", 20);
//   std::vector<int> stages = cfg.get_list<int>("train.dist.custom_pipeline_stage_id");
//   write_resolved(cfg, cfg.get<std::string>("train.output_dir"));      // <dir>/config.yaml
//
// `_base_: [common/train.yaml, ...]` (or one string) names files merged in order before the
// file's own keys, which are deep-merged on top. Each base resolves against the including
// file's folder, then LoadOptions::search_paths, then the folders in $LIBAI_CONFIG_PATH
// (':'-separated), then the nearest enclosing folder named `configs`. A cycle is an error.
//
// An override `a.b.c=VALUE` parses VALUE as YAML (`2`, `null`, `[0,0,1,1]`, `bf16`). It may
// only set a key that the config or the schema knows (a typo is an error with a did-you-mean);
// `+a.b.c=VALUE` adds a new key. With a schema, a shorthand key (Schema::alias_of) is stored
// under its full name, in files and overrides alike. Every value remembers where it was written
// (file:line:column or
// "<command line>"), and errors from getters and validation name it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/node.h"
#include "runtime/config/schema.h"

namespace libai::config {

struct LoadOptions {
  std::vector<std::string> search_paths;  // extra folders to resolve `_base_` entries against
  const Schema* schema = nullptr;         // lets overrides set keys the files leave out
};

class Config {
 public:
  Config();  // an empty map
  explicit Config(Node root);

  // Reads `path` with its `_base_` files, then applies the overrides in order.
  static Config load(const std::string& path, const std::vector<std::string>& overrides = {},
                     const LoadOptions& options = {});
  // The same from YAML text named `name` (`_base_` resolves against its folder); for tests.
  static Config parse(const std::string& yaml, const std::string& name = "<string>",
                      const LoadOptions& options = {});

  const Node& root() const { return root_; }
  Node& root() { return root_; }

  bool has(std::string_view path) const { return root_.find_path(path) != nullptr; }
  // Throws NotFound (with a did-you-mean) when the path is missing.
  const Node& node(std::string_view path) const { return root_.at(path); }

  template <typename T>
  T get(std::string_view path) const {
    return node(path).as<T>();
  }
  // `fallback` when the key is missing or null.
  template <typename T>
  T get_or(std::string_view path, T fallback) const {
    const Node* found = root_.find_path(path);
    return found == nullptr || found->is_null() ? fallback : found->as<T>();
  }
  template <typename T>
  std::vector<T> get_list(std::string_view path) const {
    return get<std::vector<T>>(path);
  }

  // Applies one "a.b=VALUE" (or "+a.b=VALUE") override.
  void apply_override(std::string_view assignment, const Schema* schema = nullptr);
  void validate(const Schema& schema) const { schema.validate(root_); }

  std::string to_yaml() const;
  std::string to_json(int indent = 2) const;

 private:
  Node root_;
};

// Writes the resolved config to `<dir>/config.yaml` (creating `dir`) and returns that path.
// Loading the file again gives the same values.
std::string write_resolved(const Config& config, const std::string& dir);

// Moves the value of every alias key the schema names (Schema::alias_of) to its full key, in
// one file's tree; a tree that sets both, to different values, is an InvalidArgument naming
// both. The loader calls it on each file when LoadOptions::schema is set.
void canonicalize_aliases(Node& tree, const Schema& schema);

// Reads a file with its `_base_` chain resolved (no overrides): the merged tree.
Node load_tree(const std::string& path, const LoadOptions& options = {});

}  // namespace libai::config
