// The one table of model families and heads: adding a model is one line here plus its folder
// under models/ (docs/ARCHITECTURE.md lists the steps).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace libai::models {

using ModelFactory = std::unique_ptr<Model> (*)(const HfConfig&, const LayerContext&);
// Builds one part of the model (Note [Model parts]); the spec is checked by the caller.
using PartFactory = std::unique_ptr<Model> (*)(const HfConfig&, const LayerContext&,
                                               const StageSpec&);

struct ModelEntry {
  std::string model_type;    // config.json "model_type"
  std::string architecture;  // config.json "architectures"[0]; "" = the type's default head
  ModelFactory make;
  PartFactory make_part = nullptr;  // null: this head cannot be cut into parts yet
};

const std::vector<ModelEntry>& model_registry();

}  // namespace libai::models
