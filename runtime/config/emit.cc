#include "runtime/config/emit.h"

#include <nlohmann/json.hpp>

#include "runtime/config/yaml_reader.h"

namespace libai::config {

namespace {

bool safe_as_plain(const std::string& text) {
  if (text.empty() || text.front() == ' ' || text.back() == ' ' || text.back() == ':') return false;
  if (std::string("-?:,[]{}#&*!|>'\"%@`").find(text.front()) != std::string::npos) return false;
  if (text.find(": ") != std::string::npos || text.find(" #") != std::string::npos) return false;
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || std::string(",[]{}").find(c) != std::string::npos)
      return false;
  }
  return resolve_plain_scalar(text, {}).kind() == Node::Kind::string;
}

std::string string_text(const std::string& text) {
  return safe_as_plain(text) ? text : quote_string(text);
}

void emit_block_map(const Node& map, int indent, std::string& out) {
  // Appending piece by piece (not `pad + key + ":"`) also avoids a GCC 12 -Wrestrict false
  // positive on chained string concatenation.
  for (const auto& [key, value] : map.entries()) {
    out.append(static_cast<std::size_t>(indent), ' ');
    out += string_text(key);
    out += ':';
    if (value.is_map() && !value.entries().empty()) {
      out += '\n';
      emit_block_map(value, indent + 2, out);
    } else {
      out += ' ';
      out += to_yaml_flow(value);
      out += '\n';
    }
  }
}

nlohmann::ordered_json json_of(const Node& node) {
  switch (node.kind()) {
    case Node::Kind::null: return nullptr;
    case Node::Kind::boolean: return node.as_bool();
    case Node::Kind::integer: return node.as_int();
    case Node::Kind::floating: return node.as_float();
    case Node::Kind::string: return node.as_string();
    case Node::Kind::list: {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const Node& item : node.items()) list.push_back(json_of(item));
      return list;
    }
    case Node::Kind::map: {
      nlohmann::ordered_json map = nlohmann::ordered_json::object();
      for (const auto& [key, value] : node.entries()) map[key] = json_of(value);
      return map;
    }
  }
  return nullptr;
}

}  // namespace

std::string to_yaml_flow(const Node& node) {
  switch (node.kind()) {
    case Node::Kind::string: return string_text(node.as_string());
    case Node::Kind::list: {
      std::string out = "[";
      const auto& items = node.items();
      for (std::size_t i = 0; i < items.size(); ++i)
        out += (i ? ", " : "") + to_yaml_flow(items[i]);
      return out + "]";
    }
    case Node::Kind::map: {
      std::string out = "{";
      const auto& entries = node.entries();
      for (std::size_t i = 0; i < entries.size(); ++i) {
        out += (i ? ", " : "") + string_text(entries[i].first) + ": " +
               to_yaml_flow(entries[i].second);
      }
      return out + "}";
    }
    default: return node.repr();
  }
}

std::string to_yaml(const Node& node) {
  if (!node.is_map() || node.entries().empty()) return to_yaml_flow(node) + "\n";
  std::string out;
  emit_block_map(node, 0, out);
  return out;
}

std::string to_json(const Node& node, int indent) { return json_of(node).dump(indent); }

}  // namespace libai::config
