// Random initialisation of a model built without weights (training from scratch), with the
// rules of Hugging Face's _init_weights for these families: normalisation weights 1, biases
// 0, every other parameter normal(0, std) (config's initializer_range, default 0.02), and,
// for GPT-2, the residual projections (attention out, MLP down) at std / sqrt(2 n_layer) as
// the GPT-2 paper prescribes. Values come from the counter RNG keyed by (seed, parameter
// name, element index of the whole parameter), so a tensor-parallel shard initialises to
// the slice of the one-device tensor: the same model whatever the layout.
//
//   auto model = models::create_model(HfConfig::load("configs/demo/char_gpt"), ctx);
//   models::init_parameters(*model, /*seed=*/1234);
#pragma once

#include <cstdint>

#include "models/model.h"

namespace libai::models {

void init_parameters(Model& model, uint64_t seed);

}  // namespace libai::models
