#include "runtime/config/node.h"

#include <charconv>
#include <cmath>

#include "runtime/config/suggest.h"
#include "runtime/error.h"

namespace libai::config {

std::string Location::str() const {
  if (file.empty()) return "<unknown>";
  if (line <= 0) return file;
  return str_cat(file, ":", line, ":", column);
}

const char* kind_name(Node::Kind kind) {
  switch (kind) {
    case Node::Kind::null: return "null";
    case Node::Kind::boolean: return "a boolean";
    case Node::Kind::integer: return "an integer";
    case Node::Kind::floating: return "a float";
    case Node::Kind::string: return "a string";
    case Node::Kind::list: return "a list";
    case Node::Kind::map: return "a map";
  }
  return "?";
}

Node Node::null(Location where) {
  Node n;
  n.location_ = std::move(where);
  return n;
}

Node Node::boolean(bool value, Location where) {
  Node n = null(std::move(where));
  n.kind_ = Kind::boolean;
  n.bool_ = value;
  return n;
}

Node Node::integer(int64_t value, Location where) {
  Node n = null(std::move(where));
  n.kind_ = Kind::integer;
  n.int_ = value;
  return n;
}

Node Node::floating(double value, Location where) {
  Node n = null(std::move(where));
  n.kind_ = Kind::floating;
  n.float_ = value;
  return n;
}

Node Node::string(std::string value, Location where) {
  Node n = null(std::move(where));
  n.kind_ = Kind::string;
  n.string_ = std::move(value);
  return n;
}

Node Node::list(Location where) {
  Node n = null(std::move(where));
  n.kind_ = Kind::list;
  return n;
}

Node Node::map(Location where) {
  Node n = null(std::move(where));
  n.kind_ = Kind::map;
  return n;
}

void Node::set_path(const std::string& path) {
  path_ = path;
  for (std::size_t i = 0; i < items_.size(); ++i) items_[i].set_path(str_cat(path, "[", i, "]"));
  for (Entry& entry : entries_) entry.second.set_path(join_path(path, entry.first));
}

std::string Node::describe() const {
  const std::string key = path_.empty() ? std::string("the config root") : "key '" + path_ + "'";
  return location_.file.empty() ? key : location_.str() + ": " + key;
}

namespace {

[[noreturn]] void wrong_kind(const Node& node, const char* expected) {
  LIBAI_THROW(InvalidArgument, node.describe(), ": expected ", expected, ", got ", node.repr(),
              " (", kind_name(node.kind()), ")");
}

}  // namespace

bool Node::as_bool() const {
  if (kind_ != Kind::boolean) wrong_kind(*this, "a boolean (true or false)");
  return bool_;
}

int64_t Node::as_int() const {
  if (kind_ != Kind::integer) wrong_kind(*this, "an integer");
  return int_;
}

double Node::as_float() const {
  if (kind_ == Kind::integer) return static_cast<double>(int_);
  if (kind_ != Kind::floating) wrong_kind(*this, "a number");
  return float_;
}

const std::string& Node::as_string() const {
  if (kind_ != Kind::string) wrong_kind(*this, "a string");
  return string_;
}

const std::vector<Node>& Node::items() const {
  if (kind_ != Kind::list) wrong_kind(*this, "a list");
  return items_;
}

std::vector<Node>& Node::items() {
  if (kind_ != Kind::list) wrong_kind(*this, "a list");
  return items_;
}

const std::vector<Node::Entry>& Node::entries() const {
  if (kind_ != Kind::map) wrong_kind(*this, "a map");
  return entries_;
}

std::vector<Node::Entry>& Node::entries() {
  if (kind_ != Kind::map) wrong_kind(*this, "a map");
  return entries_;
}

const Node* Node::find(std::string_view key) const {
  if (kind_ != Kind::map) return nullptr;
  for (const Entry& entry : entries_)
    if (entry.first == key) return &entry.second;
  return nullptr;
}

Node* Node::find(std::string_view key) {
  return const_cast<Node*>(static_cast<const Node*>(this)->find(key));
}

Node& Node::set(const std::string& key, Node value) {
  if (kind_ != Kind::map) wrong_kind(*this, "a map");
  value.set_path(join_path(path_, key));
  if (Node* existing = find(key)) return *existing = std::move(value);
  entries_.emplace_back(key, std::move(value));
  return entries_.back().second;
}

bool Node::erase(std::string_view key) {
  if (kind_ != Kind::map) return false;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->first == key) {
      entries_.erase(it);
      return true;
    }
  }
  return false;
}

const Node* Node::find_path(std::string_view dotted) const {
  const Node* node = this;
  for (const std::string& piece : split_path(dotted, "key path")) {
    node = node->find(piece);
    if (node == nullptr) return nullptr;
  }
  return node;
}

Node* Node::find_path(std::string_view dotted) {
  return const_cast<Node*>(static_cast<const Node*>(this)->find_path(dotted));
}

const Node& Node::at(std::string_view dotted) const {
  const Node* node = this;
  std::string walked = path_;
  for (const std::string& piece : split_path(dotted, "key path")) {
    const std::string next = join_path(walked, piece);
    if (!node->is_map()) {
      LIBAI_THROW(NotFound, "no key '", next, "' in the config: '", walked, "' is ",
                  kind_name(node->kind()), ", not a map");
    }
    const Node* child = node->find(piece);
    if (child == nullptr) {
      std::vector<std::string> siblings;
      for (const Entry& entry : node->entries_) siblings.push_back(entry.first);
      LIBAI_THROW(NotFound, "no key '", next, "' in the config", did_you_mean(piece, siblings));
    }
    node = child;
    walked = next;
  }
  return *node;
}

std::string Node::repr() const {
  switch (kind_) {
    case Kind::null: return "null";
    case Kind::boolean: return bool_ ? "true" : "false";
    case Kind::integer: return std::to_string(int_);
    case Kind::floating: return format_float(float_);
    case Kind::string: return quote_string(string_);
    case Kind::list: {
      std::string out = "[";
      for (std::size_t i = 0; i < items_.size(); ++i) out += (i ? ", " : "") + items_[i].repr();
      return out + "]";
    }
    case Kind::map: {
      std::string out = "{";
      for (std::size_t i = 0; i < entries_.size(); ++i)
        out += (i ? ", " : "") + entries_[i].first + ": " + entries_[i].second.repr();
      return out + "}";
    }
  }
  return "?";
}

bool operator==(const Node& a, const Node& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Node::Kind::null: return true;
    case Node::Kind::boolean: return a.bool_ == b.bool_;
    case Node::Kind::integer: return a.int_ == b.int_;
    case Node::Kind::floating:
      return a.float_ == b.float_ || (std::isnan(a.float_) && std::isnan(b.float_));
    case Node::Kind::string: return a.string_ == b.string_;
    case Node::Kind::list: return a.items_ == b.items_;
    case Node::Kind::map: return a.entries_ == b.entries_;
  }
  return false;
}

std::vector<std::string> split_path(std::string_view dotted, std::string_view what) {
  std::vector<std::string> pieces;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = dotted.find('.', start);
    const std::string_view piece = dotted.substr(start, dot - start);
    LIBAI_CHECK(!piece.empty(), "bad ", what, " '", dotted, "': empty piece between dots");
    pieces.emplace_back(piece);
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return pieces;
}

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string format_float(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  // "1" would read back as an integer; keep the float-ness visible. "1.0e-04" rather than
  // "1e-04" because YAML 1.1 readers (PyYAML) take an exponent without a dot for a string.
  const std::size_t exponent = text.find('e');
  if (text.find('.') == std::string::npos)
    text.insert(exponent == std::string::npos ? text.size() : exponent, ".0");
  return text;
}

std::string quote_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += str_cat("\\x", "0123456789abcdef"[(c >> 4) & 0xf], "0123456789abcdef"[c & 0xf]);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

namespace {

bool deletes_base(const Node& overlay) {
  const Node* flag = overlay.find("_delete_");
  return flag != nullptr && flag->kind() == Node::Kind::boolean && flag->as_bool();
}

// `_delete_` is a merge instruction, not a value: it never survives into the result.
Node without_delete_markers(Node node) {
  if (node.is_map()) {
    node.erase("_delete_");
    for (Node::Entry& entry : node.entries()) entry.second = without_delete_markers(entry.second);
  } else if (node.is_list()) {
    for (Node& item : node.items()) item = without_delete_markers(item);
  }
  return node;
}

}  // namespace

void merge_into(Node& base, const Node& overlay) {
  if (!base.is_map() || !overlay.is_map() || deletes_base(overlay)) {
    const std::string path = base.path();
    base = without_delete_markers(overlay);
    base.set_path(path);
    return;
  }
  for (const Node::Entry& entry : overlay.entries()) {
    if (entry.first == "_delete_") continue;
    if (Node* existing = base.find(entry.first)) {
      merge_into(*existing, entry.second);
    } else {
      base.set(entry.first, without_delete_markers(entry.second));
    }
  }
}

}  // namespace libai::config
