// Writing a Node tree back out as YAML or JSON.
//
//   std::string yaml = to_yaml(root);   // block maps, flow lists: reads back to the same values
//   std::string json = to_json(root);   // keys in file order
//
// Strings that would read back as something else ("1.0", "true", "null", "a: b") are quoted,
// floats always show a '.' or an exponent, so writing and re-reading is lossless.
#pragma once

#include <string>

#include "runtime/config/node.h"

namespace libai::config {

std::string to_yaml(const Node& node);
std::string to_json(const Node& node, int indent = 2);

// One value in YAML flow style, with quoting as needed: 2, abc, "1.0", [0, 1], {a: 1}.
std::string to_yaml_flow(const Node& node);

}  // namespace libai::config
