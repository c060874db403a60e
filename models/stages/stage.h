// Pipeline stages of a model: a contiguous run of its layers, loaded alone from the model's
// checkpoint, with a forward that takes and returns a few named tensors, so that the actor
// runtime can run each stage in its own thread or process and pass the tensors between them.
// Nothing here knows actors or threads; StageChain (chain.h) runs the stages one after the
// other in one thread, the eager reference for the pipeline runtime.
//
//   const int n = pipeline_num_layers(HfConfig::load("gpt2/"));             // 12
//   auto first = load_stage("gpt2/", {.first_layer = 0, .last_layer = 6, .num_layers = n});
//   auto last = load_stage("gpt2/", {.first_layer = 6, .last_layer = 12, .num_layers = n});
//   auto s0 = first->new_state(), s1 = last->new_state();   // one per group of sequences
//   CausalInputs inputs(prompts, pad_id);                    // models/causal_lm.h
//   Activations a = first->forward(inputs.prefill(), *s0);   // hidden_states, attention_mask,
//                                                            // position_ids
//   Tensor logits = last->forward(a, *s1).at("logits");      // [batch, vocab] f32
//   auto step = inputs.step(next_tokens);                    // input_ids [batch, 1], ...
//
// Each stage holds only its own parameters, under the whole model's names ("layers.7.mlp.up.
// weight" in the stage of layers [6, 12)): the first stage also holds the embedding, the last
// the final norm and the head (GPT-2's head is tied to the token embedding, so its last stage
// holds that table too; so does a tied T5's). load_stage reads only those tensors from the
// checkpoint (Hugging Face or libai layout), and with options.tp each tensor-parallel rank reads
// only its shard, as load_model does; every rank returns the same whole activations.
//
// Messages (Hugging Face's names; the tensors cross processes, so they are few and plain):
//
//   decoder-only generation (GPT-2), one micro-batch = one step of one group of sequences:
//     first stage in:  input_ids [b, n] i64, attention_mask [b, past + n] (bool or i64,
//                      1 = a real token), position_ids [b, n] i64, optional select_rows [b'] i64,
//                      trim_front [] i64, join_rows [] (any value: present = on)
//     other stages in: hidden_states [b, n, hidden], attention_mask, position_ids, and the
//                      optional ones
//     out:             hidden_states, attention_mask, position_ids and the optional ones when
//                      given (stages before the last); logits [b, vocab] f32 of the LAST
//                      position only (the last stage)
//     Each stage first makes row i of its KV caches (in the StageState) old row
//     select_rows[i], exactly as CausalLmSession::select_rows does (an empty select_rows
//     leaves no row: fresh caches), then drops the first trim_front positions of every row,
//     and passes them on, so that a driver only forwards each stage's outputs to the next
//     (giving a stage the step's select_rows again is harmless). With join_rows the b rows
//     are new sequences (past = 0 for them): they run over caches of their own, appended
//     after the group's rows once the step is done, both aligned on the right with zero
//     positions in front of the shorter side (the continuous batching of service/batcher.h,
//     whose attention_mask masks those positions). CausalInputs (models/causal_lm.h) builds
//     the first stage's inputs exactly as CausalLmSession feeds a whole model.
//
//   encoders (BERT, RoBERTa):
//     first stage in:  input_ids [b, n] i64, optional attention_mask [b, n], token_type_ids,
//                      position_ids
//     other stages in: hidden_states [b, n, hidden], optional attention_mask
//     out:             hidden_states (stages before the last) or last_hidden_state (the last:
//                      BertModel's, BERT has no norm after its layers), and attention_mask
//                      when given. Pooling is the caller's.
//
//   encoder-decoder generation (T5, MT5), one micro-batch = one step of one group; the layers
//   are cut in the order encoder layers, then decoder layers (pipeline_num_layers counts
//   both), so a stage holds encoder layers, decoder layers, or the end of the one and the
//   start of the other:
//     step 0, first stage in:  input_ids [b, s] i64 (the prompts, right-padded),
//                      attention_mask [b, s] (bool or i64, 1 = a prompt token),
//                      decoder_input_ids [b, n] i64 (decoder_start_token_id, n = 1)
//     later steps, first stage in: decoder_input_ids [b, 1] i64, optional select_rows [b'] i64
//     other stages in: what the stage before sent out
//     out (stages before the last):
//                      decoder_hidden_states [b, n, hidden]: the first stage embeds the
//                      decoder's tokens (`shared`, which only the first stage and a tied
//                      head load); stages with decoder layers run them on it, stages
//                      with encoder layers only pass it on unchanged
//                      select_rows when given
//                      step 0 only, while the encoder is not finished: hidden_states
//                      [b, s, hidden] and attention_mask when given (the encoder's, as
//                      BERT's stages)
//                      step 0 only, after the encoder: encoder_hidden_states [b, s, hidden]
//                      (its output: the stage of the last encoder layer applies the
//                      encoder's final norm) and encoder_attention_mask when given, for
//                      the decoder stages that follow
//     out (the last stage): logits [b, vocab] f32 of the last decoder position
//     At step 0 each stage with decoder layers computes its layers' cross-attention keys and
//     values from encoder_hidden_states into its caches and keeps encoder_attention_mask in
//     its StageState, so that later steps carry one token's decoder_hidden_states only (no
//     encoder output, no mask, no position). A stage knows step 0 from its state (the first
//     forward of a group); encoder inputs at a later step are an InvalidArgument. The
//     decoder's position (for the self-attention's relative bias) is the length of the
//     stage's self-attention cache, the same on every stage. select_rows reorders the self-
//     and cross-attention caches and the kept mask, as select_rows above. The relative
//     position bias, computed by each stack's first layer in the whole model, is recomputed
//     on every stage that holds layers of the stack, from that stack's table (loaded on each
//     of them; num_buckets x heads numbers, cheaper than sending [heads, q, k]).
//     Seq2SeqInputs (models/seq2seq_lm.h) builds the first stage's inputs.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "models/layer_cost.h"
#include "models/model.h"
#include "models/seq2seq_lm.h"

namespace libai::models::stages {

// Which part of a model one pipeline stage holds (models/model.h, Note [Model parts]).
using models::StageSpec;
using models::to_string;

// The stages of a pipeline with these numbers of layers, in order: {2, 1} -> [0, 2), [2, 3)
// of 3. InvalidArgument for an empty list or a stage without layers.
std::vector<StageSpec> contiguous_stages(const std::vector<int>& layers_per_stage);

using Activations = std::map<std::string, Tensor>;  // same as models::TensorMap

// What a stage keeps for one group of sequences between decoding steps (its layers' KV caches).
using StageState = models::DecodeState;

// A stage is a Module: its parameters (named_parameters, parameter_count) are this stage's only.
class PipelineStage : public Module {
 public:
  const StageSpec& spec() const { return spec_; }
  // A fresh state for one group of sequences (empty caches). Encoders keep nothing.
  virtual std::unique_ptr<StageState> new_state() const = 0;
  // One micro-batch through this stage's layers (the message contract above). A missing or
  // malformed input is an InvalidArgument naming the stage and the tensor. Made for
  // inference: run it under autograd::NoGradGuard (CausalLmSession does); training through
  // stages (backward across the messages) is not covered yet.
  virtual Activations forward(const Activations& in, StageState& state) = 0;
  // The family's map from checkpoint names to the model's parameter names (rules for the
  // other stages' parameters are unused); empty for a stage that loads nothing.
  virtual const WeightMap& weight_map() const;

 protected:
  explicit PipelineStage(const StageSpec& spec) : spec_(spec) {}

 private:
  StageSpec spec_;
};

// The number of layers a pipeline cuts (n_layer, num_hidden_layers; for T5 encoder+decoder
// layers). Unsupported for a model_type without layers to cut.
int pipeline_num_layers(const HfConfig& config);

// Builds the stage of the model that `config` describes, without weights (zero parameters),
// with its family's stage factory (models/family.h).
// InvalidArgument naming the config and the spec for an unsupported model_type or a spec out
// of range (first_layer >= last_layer, last_layer > num_layers, num_layers not the model's).
std::unique_ptr<PipelineStage> create_stage(const HfConfig& config, const StageSpec& spec,
                                            const LayerContext& ctx);
// The stage that runs `part`'s decode steps (Note [Decoding through parts] in models/model.h):
// its parameters are the part's, under the same names. InvalidArgument for a model that does
// not decode.
std::unique_ptr<PipelineStage> part_stage(std::unique_ptr<Model> part);
// A Family::make_stage for families whose parts decode: the config's head built for `spec`.
std::unique_ptr<PipelineStage> make_part_stage(const HfConfig& config, const StageSpec& spec,
                                               const LayerContext& ctx);
// The stage of a family whose parts only run forward (encoders and classifiers of its own:
// models/family.h, Note [Families from outside the library]): each micro-batch goes through
// the part's forward (Note [Model parts]: the first part takes the model's inputs, the others
// what the part before returned, the last returns the model's outputs) without autograd, and
// the stage keeps nothing between micro-batches. make_forward_stage is the Family::make_stage.
std::unique_ptr<PipelineStage> forward_stage(std::unique_ptr<Model> part);
std::unique_ptr<PipelineStage> make_forward_stage(const HfConfig& config, const StageSpec& spec,
                                                  const LayerContext& ctx);
// Loads the stage's part of the model in `folder` (config.json + weights; only this stage's
// tensors are read). options.tp: tensor parallelism inside the stage, exactly as load_model.
std::unique_ptr<PipelineStage> load_stage(const std::filesystem::path& folder,
                                          const StageSpec& spec, const LoadOptions& options = {});

// What generation over a decoder-only pipeline needs of the model: the vocabulary, an id to
// left-pad prompts with (masked out), and the longest sequence. InvalidArgument for a model
// that is not decoder-only.
struct CausalLmInfo {
  int64_t vocab_size = 0, pad_id = 0, max_positions = 0;
};
CausalLmInfo causal_lm_info(const HfConfig& config);

// Whether generation over the model's stages is encoder-decoder (T5, MT5), or decoder-only
// (GPT-2): the family's generation kind (models/family.h).
bool is_encoder_decoder(const HfConfig& config);
bool is_decoder_only(const HfConfig& config);
// What generation over an encoder-decoder pipeline needs: the vocabulary, the id that pads
// the prompts (masked out), and decoder_start_token_id. InvalidArgument for a model that is
// not encoder-decoder.
struct Seq2SeqLmInfo {
  int64_t vocab_size = 0, pad_id = 0, decoder_start_id = 0;
};
Seq2SeqLmInfo seq2seq_lm_info(const HfConfig& config);

// Planning estimates for schedule/ (pure numbers, no model is built), for one forward pass
// over `tokens` tokens that each attend to `context` keys (0: to `tokens` keys, one sequence
// of `tokens` tokens; decoding: tokens = batch, context = past + 1), with parameters,
// activations and caches in `dtype`:
//   flops                      multiply-adds x 2 of the projections and of attention
//   weight_bytes               the parameters
//   kv_bytes_per_token         the KV cache one token adds (decoding; T5 decoder layers count
//                              their self-attention only, cross-attention keys are per source
//                              token)
//   activation_bytes_per_token what the layer keeps per token for its backward (an estimate
//                              after Korthikanti et al. 2022, without dropout masks)
//   output_bytes_per_token     the hidden state it passes on: the message after a stage
using models::LayerCost;  // models/layer_cost.h
// One entry per layer in pipeline order (T5: the encoder's layers, then the decoder's; each
// stack's first layer counts its relative-position bias table, the encoder's last layer its
// final norm, as the stage holding it applies that norm).
std::vector<LayerCost> layer_costs(const HfConfig& config, int64_t tokens, DType dtype = DType::f32,
                                   int64_t context = 0);
// The first stage's extra part (embeddings, and their norm for BERT) and the last stage's
// (final norm and head; GPT-2's and a tied T5's head count their table again, as the last
// stage loads it).
// `tokens`: the positions the head computes (decoding: one per sequence).
LayerCost embedding_cost(const HfConfig& config, int64_t tokens, DType dtype = DType::f32);
LayerCost head_cost(const HfConfig& config, int64_t tokens, DType dtype = DType::f32);

}  // namespace libai::models::stages
