// Note [Resolving _base_]: a base names a file relative to the including file first, so a
// folder of configs can be copied elsewhere and still work; the search paths after it let
// `common/train.yaml` mean the shared file from any job folder below `configs/`.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/config/config.h"
#include "runtime/config/emit.h"
#include "runtime/config/yaml_reader.h"
#include "runtime/error.h"

namespace libai::config {

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> search_folders(const fs::path& including, const LoadOptions& options) {
  std::vector<fs::path> folders{including.parent_path()};
  for (const std::string& folder : options.search_paths) folders.emplace_back(folder);
  if (const char* env = std::getenv("LIBAI_CONFIG_PATH")) {
    std::string_view rest(env);
    while (!rest.empty()) {
      const std::size_t colon = rest.find(':');
      if (colon != 0) folders.emplace_back(std::string(rest.substr(0, colon)));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  for (fs::path folder = fs::absolute(including).parent_path(); !folder.empty();
       folder = folder.parent_path()) {
    if (folder.filename() == "configs") {
      folders.push_back(folder);
      break;
    }
    if (folder == folder.parent_path()) break;
  }
  return folders;
}

fs::path resolve_base(const Node& entry, const fs::path& including, const LoadOptions& options) {
  const fs::path wanted(entry.as_string());
  if (wanted.is_absolute()) {
    LIBAI_CHECK_KIND(NotFound, fs::is_regular_file(wanted), entry.location().str(),
                     ": _base_ file '", wanted.string(), "' not found");
    return wanted;
  }
  std::string tried;
  for (const fs::path& folder : search_folders(including, options)) {
    const fs::path candidate = (folder / wanted).lexically_normal();
    if (fs::is_regular_file(candidate)) return candidate;
    tried += (tried.empty() ? "" : ", ") + candidate.string();
  }
  LIBAI_THROW(NotFound, entry.location().str(), ": _base_ file '", wanted.string(),
              "' not found (looked for ", tried, ")");
}

std::string chain_text(const std::vector<fs::path>& stack, const fs::path& last) {
  std::string text;
  for (const fs::path& file : stack) text += file.string() + " -> ";
  return text + last.string();
}

void collect_aliases(const Schema& section, const std::string& path,
                     std::vector<std::pair<std::string, std::string>>& aliases) {
  for (const auto& [name, field] : section.fields()) {
    const std::string key = join_path(path, name);
    if (field.is_alias()) aliases.emplace_back(key, field.alias_target());
    if (field.type() == Schema::Type::map) collect_aliases(field, key, aliases);
  }
}

// 1 and 1.0 are the same setting; anything else compares by value and kind.
bool same_setting(const Node& a, const Node& b) {
  const auto is_number = [](const Node& n) {
    return n.kind() == Node::Kind::integer || n.kind() == Node::Kind::floating;
  };
  if (is_number(a) && is_number(b)) return a.as_float() == b.as_float();
  return a == b;
}

Node load_recursive(const Node& own_tree, const fs::path& file, const LoadOptions& options,
                    std::vector<fs::path>& stack, std::vector<fs::path>& shown) {
  Node own = own_tree;
  if (options.schema != nullptr) canonicalize_aliases(own, *options.schema);
  Node result = Node::map(own.location());
  if (const Node* bases = own.find("_base_")) {
    std::vector<Node> entries;
    if (bases->kind() == Node::Kind::string) {
      entries.push_back(*bases);
    } else if (bases->is_list()) {
      entries = bases->items();
    } else if (!bases->is_null()) {
      LIBAI_THROW(InvalidArgument, bases->location().str(),
                  ": _base_ must be a file name or a list of file names, got ", bases->repr());
    }
    for (const Node& entry : entries) {
      LIBAI_CHECK(entry.kind() == Node::Kind::string, entry.location().str(),
                  ": a _base_ entry must be a file name, got ", entry.repr());
      const fs::path base = resolve_base(entry, file, options);
      const fs::path identity = fs::weakly_canonical(base);
      for (const fs::path& open : stack) {
        LIBAI_CHECK(open != identity, entry.location().str(),
                    ": _base_ cycle: ", chain_text(shown, base));
      }
      stack.push_back(identity);
      shown.push_back(base);
      merge_into(result,
                 load_recursive(parse_yaml_file(base.string()), base, options, stack, shown));
      stack.pop_back();
      shown.pop_back();
    }
    own.erase("_base_");
  }
  merge_into(result, own);
  return result;
}

Node load_from(const Node& parsed, const fs::path& file, const LoadOptions& options) {
  std::vector<fs::path> stack{fs::weakly_canonical(file)};
  std::vector<fs::path> shown{file};
  Node root = load_recursive(parsed, file, options, stack, shown);
  root.set_path("");
  return root;
}

}  // namespace

// Note [Aliases per file]: a shorthand is moved to its full key file by file, before the files
// merge, so a later file (or an override) that sets either name replaces what a base set under
// the other name; only one file that sets both names, differently, is a conflict.
void canonicalize_aliases(Node& tree, const Schema& schema) {
  std::vector<std::pair<std::string, std::string>> aliases;
  collect_aliases(schema, "", aliases);
  for (const auto& [shorthand, full] : aliases) {
    const Node* given = tree.find_path(shorthand);
    if (given == nullptr) continue;
    const Node value = *given;
    const auto describe = [](const Node& node, const std::string& key) {
      const Location& at = node.key_location().file.empty() ? node.location() : node.key_location();
      return str_cat(at.file.empty() ? "" : at.str() + ": ", key, " = ", node.repr());
    };
    if (const Node* other = tree.find_path(full)) {
      LIBAI_CHECK(same_setting(*other, value), describe(value, shorthand), " and ",
                  describe(*other, full), " differ: ", shorthand, " is a shorthand for ", full,
                  "; set one of them");
    } else {
      const std::vector<std::string> pieces = split_path(full, "alias target");
      Node* section = &tree;
      for (std::size_t i = 0; i + 1 < pieces.size(); ++i) {
        Node* child = section->find(pieces[i]);
        if (child == nullptr) child = &section->set(pieces[i], Node::map(value.location()));
        LIBAI_CHECK(child->is_map(), child->describe(), ": cannot hold ", full, " (given as ",
                    shorthand, "): not a map");
        section = child;
      }
      section->set(pieces.back(), value);
    }
    const std::size_t dot = shorthand.rfind('.');
    Node* parent = dot == std::string::npos ? &tree : tree.find_path(shorthand.substr(0, dot));
    parent->erase(shorthand.substr(dot == std::string::npos ? 0 : dot + 1));
  }
}

Node load_tree(const std::string& path, const LoadOptions& options) {
  return load_from(parse_yaml_file(path), fs::path(path), options);
}

Config::Config() : root_(Node::map()) {}
Config::Config(Node root) : root_(std::move(root)) { root_.set_path(""); }

Config Config::load(const std::string& path, const std::vector<std::string>& overrides,
                    const LoadOptions& options) {
  Config config(load_tree(path, options));
  for (const std::string& assignment : overrides) config.apply_override(assignment, options.schema);
  return config;
}

Config Config::parse(const std::string& yaml, const std::string& name, const LoadOptions& options) {
  Node parsed = parse_yaml(yaml, Location{name, 0, 0});
  if (parsed.is_null()) parsed = Node::map(Location{name, 1, 1});
  LIBAI_CHECK(parsed.is_map(), parsed.location().str(),
              ": the top level of a config must be a map");
  return Config(load_from(parsed, fs::path(name), options));
}

std::string Config::to_yaml() const { return config::to_yaml(root_); }
std::string Config::to_json(int indent) const { return config::to_json(root_, indent); }

std::string write_resolved(const Config& config, const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  LIBAI_CHECK_KIND(IoError, !error, "cannot create output folder '", dir, "': ", error.message());
  const fs::path path = fs::path(dir) / "config.yaml";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  LIBAI_CHECK_KIND(IoError, out.good(), "cannot write '", path.string(), "'");
  out << "# The resolved config of this run (libai-actor " << LIBAI_VERSION
      << "): _base_ files merged and overrides applied.\n"
      << "# `libai-actor run " << path.filename().string() << "` reproduces it.\n"
      << config.to_yaml();
  out.close();
  LIBAI_CHECK_KIND(IoError, !out.fail(), "cannot write '", path.string(), "'");
  return path.string();
}

}  // namespace libai::config
