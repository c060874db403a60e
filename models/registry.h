// The one table of model families and heads: adding a model is one line here plus its folder
// under models/ (docs/ARCHITECTURE.md lists the steps).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace libai::models {

// Builds the whole model (no part) or one part of it (Note [Model parts]), checking the part.
using ModelFactory = std::unique_ptr<Model> (*)(const HfConfig&, const LayerContext&,
                                                const std::optional<StageSpec>&);

struct ModelEntry {
  std::string model_type;    // config.json "model_type"
  std::string architecture;  // config.json "architectures"[0]; "" = the type's default head
  ModelFactory make;
};

const std::vector<ModelEntry>& model_registry();

}  // namespace libai::models
