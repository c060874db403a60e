// Jobs over pipelines of model stages: stage actors that run a model's layers (loaded alone
// from its checkpoint, models/stages/stage.h), generation whose every decoding step goes
// through the pipeline, and encoding of micro-batches. The jobs run on plain threads and
// reach the pipeline through a PipelineClient, so they are the same in one process and on a
// cluster.
//
//   auto factory = model_stage_factory("gpt2/", layout, stage_of);   // loads each slot's layers
//   LocalPipeline pipeline(system, layout, factory);
//   auto results = run_generation(pipeline.client(), layout, info, prompt_groups, config);
//   pipeline.wait();
//
// Generation: each group of prompts runs generation::generate (greedy, sampling, beam search,
// penalties: everything eager mode has) on its own thread, over a decode session whose model
// calls are round trips through the pipeline (decoder-only models: CausalLmSession;
// encoder-decoder models, T5 and MT5: Seq2SeqLmSession, the encoder running in the group's
// step 0); with at least as many groups as stages every stage has work at every step
// (docs/DESIGN.md, Note [Schedules from buffer quotas]). When a group's generation ends, its done
// packet frees its KV caches on every stage.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "ops/packed_linear.h"
#include "actors/pipeline.h"
#include "plan/timed_layers.h"
#include "models/generation/generate.h"
#include "models/stages/stage.h"

namespace libai::actors {

// One model stage: its layers and, per group, its state (KV caches).
class ModelStageCompute : public StageCompute {
 public:
  explicit ModelStageCompute(std::unique_ptr<models::stages::PipelineStage> stage);
  models::TensorMap forward(int group, const models::TensorMap& inputs) override;
  void release(int group) override;
  models::stages::PipelineStage& stage() { return *stage_; }

 private:
  std::unique_ptr<models::stages::PipelineStage> stage_;
  std::map<int, std::unique_ptr<models::stages::StageState>> states_;
};

// stage_of[layer] = pipeline stage. The factory loads, for each slot, its stage's layers; the
// tensor-parallel ranks of one (replica, stage) share a local communicator (their devices are
// in one process: tensor parallelism stays inside a node, as Megatron places it).
// `quantize` (model.quantize of a job config): the stages' linear layers and head quantized as
// LoadOptions::quantize says, but those `keep` names. `precision_of_stage` (per stage, from
// train.dist.stage_precision): each stage's own packed dtype or quantization instead.
ComputeFactory model_stage_factory(const std::filesystem::path& folder, const PipelineLayout& layout,
                                   const std::vector<int>& stage_of,
                                   DType dtype = DType::f32, const ops::QuantSpec& quantize = {},
                                   const std::vector<std::string>& keep = {},
                                   const std::vector<ops::WeightPrecision>& precision_of_stage = {});

// The layer ranges of the stages of `stage_of`.
std::vector<models::stages::StageSpec> stage_specs(const std::vector<int>& stage_of);

// Prompts dealt into `groups` contiguous groups of nearly equal size (the first groups get
// the remainder); groups <= prompts.
std::vector<std::vector<std::vector<int64_t>>> split_into_groups(
    const std::vector<std::vector<int64_t>>& prompts, int groups);

// Runs generate() for every group (group g of layout.groups' numbering gets prompt_groups[g])
// and returns, per group, generate()'s result. Throws the pipeline's error, if any. A
// decoder-only model's groups are fed by CausalInputs, an encoder-decoder model's (T5, MT5)
// by Seq2SeqInputs: the prompts are the encoder's input, and the results hold the decoder's
// new tokens, as eager generate() returns them.
std::vector<std::vector<std::vector<models::generation::GeneratedSequence>>> run_generation(
    PipelineClient& client, const PipelineLayout& layout, const models::stages::CausalLmInfo& info,
    const std::vector<std::vector<std::vector<int64_t>>>& prompt_groups,
    const models::generation::GenerationConfig& config);
std::vector<std::vector<std::vector<models::generation::GeneratedSequence>>> run_generation(
    PipelineClient& client, const PipelineLayout& layout,
    const models::stages::Seq2SeqLmInfo& info,
    const std::vector<std::vector<std::vector<int64_t>>>& prompt_groups,
    const models::generation::GenerationConfig& config);
// The one of the two that `model` (its config.json) needs.
std::vector<std::vector<std::vector<models::generation::GeneratedSequence>>> run_generation(
    PipelineClient& client, const PipelineLayout& layout, const models::HfConfig& model,
    const std::vector<std::vector<std::vector<int64_t>>>& prompt_groups,
    const models::generation::GenerationConfig& config);

// Encodes micro-batch g (its model inputs: input_ids, attention_mask, ...) as group g and
// returns each micro-batch's last_hidden_state.
std::vector<Tensor> run_encoding(PipelineClient& client, const PipelineLayout& layout,
                                 const std::vector<models::TensorMap>& micro_batches);

}  // namespace libai::actors
