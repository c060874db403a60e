// Reading YAML text into a located Node tree (yaml-cpp does the parsing).
//
//   Node root = parse_yaml_file("configs/common/train.yaml");    // a map; {} for an empty file
//   Node value = parse_yaml("[0, 0, 1, 1]", Location::command_line());
//
// Malformed YAML is a CorruptInput naming file:line:column; a missing file is a NotFound.
// Duplicate keys are an error (yaml-cpp would keep one silently).
#pragma once

#include <string>
#include <string_view>

#include "runtime/config/node.h"

namespace libai::config {

// Parses one YAML document. Nodes are located at origin.file with the line and column of the
// text, except for text from the command line, whose nodes all keep Location::command_line().
Node parse_yaml(const std::string& text, const Location& origin);

// Parses a config file; the top level must be a map (an empty file is an empty map).
Node parse_yaml_file(const std::string& path);

// How an unquoted scalar reads under the YAML 1.2 core schema: null, boolean, integer,
// floating or string. Used by the writer to know when a string needs quotes.
Node resolve_plain_scalar(std::string_view text, const Location& where);

}  // namespace libai::config
