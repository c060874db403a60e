// Planning estimates of layers, embeddings and heads from config.json alone (stage.h): each
// family's cost model (models/family.h), found through the registry.
#include "models/family.h"
#include "models/stages/stage.h"

namespace libai::models::stages {

namespace {

const FamilyCosts& costs_of(const HfConfig& config) {
  const Family* family = find_family(config.model_type());
  if (!family || !family->costs.layers || !family->costs.embedding || !family->costs.head)
    throw Error(ErrorKind::unsupported,
                str_cat(config.path(), ": no cost model for model_type \"", config.model_type(),
                        "\" (",
                        family_names([](const Family& f) { return f.costs.layers != nullptr; }),
                        ")"));
  return family->costs;
}

}  // namespace

std::vector<LayerCost> layer_costs(const HfConfig& config, int64_t tokens, DType dtype,
                                   int64_t context) {
  LIBAI_CHECK(tokens > 0 && context >= 0, config.path(),
              ": layer_costs needs tokens > 0 and context >= 0, got ", tokens, " and ", context);
  return costs_of(config).layers(config, double(tokens), double(context > 0 ? context : tokens),
                                 double(dtype_size(dtype)));
}

LayerCost embedding_cost(const HfConfig& config, int64_t tokens, DType dtype) {
  return costs_of(config).embedding(config, double(tokens), double(dtype_size(dtype)));
}

LayerCost head_cost(const HfConfig& config, int64_t tokens, DType dtype) {
  return costs_of(config).head(config, double(tokens), double(dtype_size(dtype)));
}

}  // namespace libai::models::stages
