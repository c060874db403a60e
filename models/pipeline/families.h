// The pipeline stages of each model family (internal to models/pipeline/): one factory per
// family that stage.cc's table names, and the checks they share.
#pragma once

#include "models/pipeline/stage.h"

namespace libai::models::pipeline {

std::unique_ptr<PipelineStage> make_gpt2_stage(const HfConfig& config, const StageSpec& spec,
                                               const LayerContext& ctx);
std::unique_ptr<PipelineStage> make_bert_stage(const HfConfig& config, const StageSpec& spec,
                                               const LayerContext& ctx);
std::unique_ptr<PipelineStage> make_roberta_stage(const HfConfig& config, const StageSpec& spec,
                                                  const LayerContext& ctx);
std::unique_ptr<PipelineStage> make_t5_stage(const HfConfig& config, const StageSpec& spec,
                                             const LayerContext& ctx);
std::unique_ptr<PipelineStage> make_mt5_stage(const HfConfig& config, const StageSpec& spec,
                                              const LayerContext& ctx);

// The input `name`, with an error naming the stage when it is missing.
const Tensor& require_activation(const Activations& in, const std::string& name, const char* family,
                                 const StageSpec& spec);
// The [batch, seq, hidden] activations a stage after the first receives.
const Tensor& require_hidden_states(const Activations& in, int64_t hidden, const char* family,
                                    const StageSpec& spec);
// An attention mask as the layers take it: bool, 1 = attend (undefined stays undefined).
Tensor keep_mask(const Tensor& attention_mask);

}  // namespace libai::models::pipeline
