// Checks the families' inference stages share (models/<family>/*_stage.cc): the inputs of a
// stage message, with errors naming the stage and the tensor.
#pragma once

#include "models/pipeline/stage.h"

namespace libai::models::pipeline {

// The input `name`, with an error naming the stage when it is missing.
const Tensor& require_activation(const Activations& in, const std::string& name, const char* family,
                                 const StageSpec& spec);
// The [batch, seq, hidden] activations a stage after the first receives.
const Tensor& require_hidden_states(const Activations& in, int64_t hidden, const char* family,
                                    const StageSpec& spec);
// An attention mask as the layers take it: bool, 1 = attend (undefined stays undefined).
Tensor keep_mask(const Tensor& attention_mask);

}  // namespace libai::models::pipeline
