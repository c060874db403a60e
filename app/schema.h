// The schema of LiBai-Actor's configs, and how a module adds its own section.
//
//   Config cfg = load_libai_config("configs/default.yaml", {"train.seed=7"});  // validated
//
//   // In a module's .cc (runs when its library loads):
//   static SchemaRegistration data_schema("train.data", Schema::map()
//       .key("path", Schema::string().required())
//       .key("seq_length", Schema::integer().min(1)));
//
// The built-in part (train, optim, graph, model, job) lives in libai_schema.cc and agrees
// with configs/common/*.yaml; a registered section replaces the one at its path (the open
// `model` map, say) or adds a new one.
#pragma once

#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/config/schema.h"

namespace libai::config {

// The built-in schema with every registered section mounted.
Schema libai_schema();

void register_schema(const std::string& dotted_path, Schema section);

struct SchemaRegistration {
  SchemaRegistration(const std::string& dotted_path, Schema section) {
    register_schema(dotted_path, std::move(section));
  }
};

// Config::load with the project schema (so overrides may set any key it knows), validated.
Config load_libai_config(const std::string& path, const std::vector<std::string>& overrides = {},
                         LoadOptions options = {});

}  // namespace libai::config
