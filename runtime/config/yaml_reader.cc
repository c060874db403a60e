#include "runtime/config/yaml_reader.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "runtime/error.h"

namespace libai::config {

namespace {

bool matches(std::string_view text, const std::regex& pattern) {
  return std::regex_match(text.begin(), text.end(), pattern);
}

Location location_of(const YAML::Mark& mark, const Location& origin, const Location& fallback) {
  if (mark.is_null()) return fallback;
  if (origin.file == Location::command_line().file) return origin;
  return {origin.file, mark.line + 1, mark.column + 1};
}

Node integer_from(std::string_view digits, int base, bool negative, std::string_view text,
                  const Location& where) {
  uint64_t magnitude = 0;
  const auto result =
      std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  LIBAI_CHECK(result.ec == std::errc() && magnitude <= limit, where.str(), ": integer ", text,
              " does not fit in 64 bits");
  // Two's complement negation of the magnitude covers INT64_MIN without overflow.
  const uint64_t bits = negative ? ~magnitude + 1 : magnitude;
  return Node::integer(static_cast<int64_t>(bits), where);
}

Node convert(const YAML::Node& yaml, const Location& origin, const Location& fallback);

// The offset of the first byte of `text` that is not well-formed UTF-8 (no overlong forms, no
// surrogates, nothing past U+10FFFF), or npos.
std::size_t invalid_utf8_at(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char c = byte(i);
    int length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
    if (c < 0x80) {
      length = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;   // overlong below U+0800
      if (c == 0xED) high = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;   // overlong below U+10000
      if (c == 0xF4) high = 0x8F;  // past U+10FFFF
    } else {
      return i;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
    }
    if (i + std::size_t(length) > text.size()) return i;
    for (int k = 1; k < length; ++k) {
      const unsigned char next = byte(i + std::size_t(k));
      if (k == 1 ? (next < low || next > high) : (next < 0x80 || next > 0xBF)) return i;
    }
    i += std::size_t(length);
  }
  return std::string_view::npos;
}

// YAML text is Unicode, and the resolved config is written out again as YAML and JSON
// (config.json of a checkpoint), which cannot hold other bytes: refuse them where they are.
void check_utf8(std::string_view text, const Location& where) {
  const std::size_t at = invalid_utf8_at(text);
  if (at == std::string_view::npos) return;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", unsigned(static_cast<unsigned char>(text[at])));
  LIBAI_THROW(InvalidArgument, where.str(), ": not UTF-8 (byte ", hex, " at offset ", at, ")");
}

Node convert_scalar(const YAML::Node& yaml, const Location& where) {
  const std::string& text = yaml.Scalar();
  check_utf8(text, where);
  const std::string& tag = yaml.Tag();
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return Node::string(text, where);
  if (tag == "?" || tag.empty()) return resolve_plain_scalar(text, where);
  // An explicit core tag (!!int 3) must still hold a value of that type.
  Node value = resolve_plain_scalar(text, where);
  const auto expect = [&](Node::Kind kind, const char* name) {
    LIBAI_CHECK(value.kind() == kind, where.str(), ": '", text, "' is not a valid ", name);
    return value;
  };
  if (tag == "tag:yaml.org,2002:int") return expect(Node::Kind::integer, "!!int");
  if (tag == "tag:yaml.org,2002:bool") return expect(Node::Kind::boolean, "!!bool");
  if (tag == "tag:yaml.org,2002:null") return expect(Node::Kind::null, "!!null");
  if (tag == "tag:yaml.org,2002:float") {
    if (value.kind() == Node::Kind::integer)
      return Node::floating(static_cast<double>(value.as_int()), where);
    return expect(Node::Kind::floating, "!!float");
  }
  LIBAI_THROW(Unsupported, where.str(), ": unsupported YAML tag '", tag, "'");
}

Node convert(const YAML::Node& yaml, const Location& origin, const Location& fallback) {
  const Location where = location_of(yaml.Mark(), origin, fallback);
  switch (yaml.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null: return Node::null(where);
    case YAML::NodeType::Scalar: return convert_scalar(yaml, where);
    case YAML::NodeType::Sequence: {
      Node list = Node::list(where);
      for (const YAML::Node& item : yaml) list.items().push_back(convert(item, origin, where));
      return list;
    }
    case YAML::NodeType::Map: {
      Node map = Node::map(where);
      for (auto it = yaml.begin(); it != yaml.end(); ++it) {
        const Location key_where = location_of(it->first.Mark(), origin, where);
        LIBAI_CHECK(it->first.IsScalar(), key_where.str(), ": a map key must be a plain scalar");
        const std::string key = it->first.Scalar();
        check_utf8(key, key_where);
        LIBAI_CHECK(map.find(key) == nullptr, key_where.str(), ": duplicate key '", key, "'");
        // `key:` with no value has no mark of its own: point at the key instead.
        Node value = convert(it->second, origin, key_where);
        if (origin.file != Location::command_line().file) value.set_key_location(key_where);
        map.entries().emplace_back(key, std::move(value));
      }
      return map;
    }
  }
  return Node::null(where);
}

}  // namespace

Node resolve_plain_scalar(std::string_view text, const Location& where) {
  static const std::regex null_re("null|Null|NULL|~|");
  static const std::regex true_re("true|True|TRUE");
  static const std::regex false_re("false|False|FALSE");
  static const std::regex decimal_re("[-+]?[0-9]+");
  static const std::regex octal_re("0o[0-7]+");
  static const std::regex hex_re("0x[0-9a-fA-F]+");
  static const std::regex float_re("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  static const std::regex inf_re("[-+]?\\.(inf|Inf|INF)");
  static const std::regex nan_re("\\.(nan|NaN|NAN)");
  if (matches(text, null_re)) return Node::null(where);
  if (matches(text, true_re)) return Node::boolean(true, where);
  if (matches(text, false_re)) return Node::boolean(false, where);
  if (matches(text, decimal_re)) {
    const bool negative = text[0] == '-';
    const std::size_t skip = (text[0] == '-' || text[0] == '+') ? 1 : 0;
    return integer_from(text.substr(skip), 10, negative, text, where);
  }
  if (matches(text, octal_re)) return integer_from(text.substr(2), 8, false, text, where);
  if (matches(text, hex_re)) return integer_from(text.substr(2), 16, false, text, where);
  if (matches(text, float_re)) {
    double value = 0.0;
    const std::size_t skip = text[0] == '+' ? 1 : 0;
    const auto result = std::from_chars(text.data() + skip, text.data() + text.size(), value);
    LIBAI_CHECK(result.ec == std::errc(), where.str(), ": float ", text, " is out of range");
    return Node::floating(value, where);
  }
  if (matches(text, inf_re)) return Node::floating(text[0] == '-' ? -INFINITY : INFINITY, where);
  if (matches(text, nan_re)) return Node::floating(NAN, where);
  return Node::string(std::string(text), where);
}

Node parse_yaml(const std::string& text, const Location& origin) {
  YAML::Node yaml;
  try {
    yaml = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    Location where = origin;
    if (!e.mark.is_null() && origin.file != Location::command_line().file)
      where = {origin.file, e.mark.line + 1, e.mark.column + 1};
    LIBAI_THROW(CorruptInput, where.str(), ": malformed YAML: ", e.msg);
  }
  return convert(yaml, origin, origin);
}

Node parse_yaml_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LIBAI_CHECK_KIND(NotFound, in.good(), "config file '", path, "' cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  Node root = parse_yaml(text.str(), Location{path, 0, 0});
  if (root.is_null()) return Node::map(Location{path, 1, 1});
  LIBAI_CHECK(root.is_map(), root.location().str(),
              ": the top level of a config must be a map, got ", kind_name(root.kind()));
  return root;
}

}  // namespace libai::config
