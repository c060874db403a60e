// Command-line overrides: "train.dist.tensor_parallel_size=2", "+model.extra=1".
#include <regex>

#include "runtime/config/config.h"
#include "runtime/config/suggest.h"
#include "runtime/config/yaml_reader.h"
#include "runtime/error.h"

namespace libai::config {

namespace {

// Whether the schema lets a key the files leave out be set: it names the key, or the key sits
// inside a section the schema leaves open (the model section, for instance).
bool schema_allows(const Schema* schema, const std::vector<std::string>& pieces,
                   std::size_t count) {
  if (schema == nullptr) return false;
  const Schema* section = schema;
  for (std::size_t i = 0; i < count; ++i) {
    if (section->type() == Schema::Type::any) return true;
    const Schema* next = section->field(pieces[i]);
    if (next == nullptr) return section->type() == Schema::Type::map && section->is_open();
    section = next;
  }
  return true;
}

[[noreturn]] void unknown_key(const std::string& assignment, const std::string& path,
                              const Node& parent, const std::string& piece, const Schema* schema,
                              const std::string& parent_path) {
  std::vector<std::string> known;
  if (parent.is_map())
    for (const auto& entry : parent.entries()) known.push_back(entry.first);
  if (schema != nullptr) {
    const Schema* section = parent_path.empty() ? schema : schema->find_path(parent_path);
    if (section != nullptr)
      for (const auto& field : section->fields()) known.push_back(field.first);
  }
  LIBAI_THROW(InvalidArgument, "<command line>: override '", assignment, "' sets unknown key '",
              path, "'", did_you_mean(piece, known), "; write +", path, "=... to add a new key");
}

}  // namespace

void Config::apply_override(std::string_view assignment, const Schema* schema) {
  const std::string text(assignment);
  const std::size_t equals = text.find('=');
  LIBAI_CHECK(equals != std::string::npos, "bad override '", text,
              "': expected KEY=VALUE, e.g. train.dist.tensor_parallel_size=2");
  std::string key = text.substr(0, equals);
  const std::string value_text = text.substr(equals + 1);
  const bool add = !key.empty() && key[0] == '+';
  if (add) key.erase(0, 1);

  static const std::regex key_re("[A-Za-z_][A-Za-z0-9_-]*(\\.[A-Za-z0-9_][A-Za-z0-9_-]*)*");
  LIBAI_CHECK(std::regex_match(key, key_re), "bad override '", text, "': '", key,
              "' is not a dotted key path like train.dist.tensor_parallel_size");
  LIBAI_CHECK(!value_text.empty(), "bad override '", text, "': no value after '=' (write ", key,
              "=null for null, or ", key, "='' for an empty string)");

  Node value;
  try {
    value = parse_yaml(value_text, Location::command_line());
  } catch (const CorruptInput& e) {
    LIBAI_THROW(InvalidArgument, "bad override '", text, "': the value is not valid YAML (",
                e.what(), ")");
  }

  if (schema != nullptr)
    if (const Schema* field = schema->find_path(key); field != nullptr && field->is_alias())
      key = field->alias_target();  // a shorthand sets its full key

  const std::vector<std::string> pieces = split_path(key, "override key");
  Node* node = &root_;
  std::string walked;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::string path = join_path(walked, pieces[i]);
    LIBAI_CHECK(node->is_map(), "<command line>: override '", text, "' cannot set '", key, "': '",
                walked, "' is ", kind_name(node->kind()), ", not a map");
    Node* child = node->find(pieces[i]);
    if (child == nullptr && !add && !schema_allows(schema, pieces, i + 1))
      unknown_key(text, path, *node, pieces[i], schema, walked);
    if (i + 1 == pieces.size()) {
      node->set(pieces[i], std::move(value));
      return;
    }
    if (child == nullptr) child = &node->set(pieces[i], Node::map(Location::command_line()));
    node = child;
    walked = path;
  }
}

}  // namespace libai::config
