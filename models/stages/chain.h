// The stages of one pipeline run one after the other in this thread: the eager reference that
// the pipeline runtime is checked against, and a generation::GenerativeModel over the stages
// of a decoder-only model (ChainedCausalLm) or of an encoder-decoder one (ChainedSeq2SeqLm).
//
//   StageChain chain = StageChain::load("gpt2/", contiguous_stages({6, 6}));
//   auto states = chain.new_states();                        // one group of sequences
//   Activations out = chain.forward(CausalInputs(prompts, pad).prefill(), states);
//   out.at("logits");                                        // [batch, vocab]
//
//   ChainedCausalLm lm(chain);                               // generate() over the stages
//   auto results = generation::generate(lm, prompts, config);
//
//   StageChain t5 = StageChain::load("t5/", contiguous_stages({6, 6}));  // encoder | decoder
//   ChainedSeq2SeqLm seq2seq(t5);                            // prompts: the encoder's input
//   auto translated = generation::generate(seq2seq, prompts, config);
//
// Between two stages the chain passes what the runtime passes: the earlier stage's outputs,
// unchanged (stage.h's message contract).
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "models/generation/session.h"
#include "models/stages/stage.h"

namespace libai::models::stages {

// One StageState per stage: what the pipeline keeps for one group of sequences.
using ChainState = std::vector<std::unique_ptr<StageState>>;

class StageChain {
 public:
  // InvalidArgument unless the stages are contiguous and cover every layer, in order.
  StageChain(std::vector<std::unique_ptr<PipelineStage>> stages, HfConfig config);
  // load_stage for each spec, with the same options.
  static StageChain load(const std::filesystem::path& folder, const std::vector<StageSpec>& specs,
                         const LoadOptions& options = {});

  size_t size() const { return stages_.size(); }
  PipelineStage& stage(size_t i) { return *stages_.at(i); }
  const HfConfig& config() const { return config_; }
  ChainState new_states() const;
  // `in` through every stage: the first stage's inputs to the last stage's outputs.
  Activations forward(const Activations& in, ChainState& states);

 private:
  std::vector<std::unique_ptr<PipelineStage>> stages_;
  HfConfig config_;
};

// generate() over a chain of a decoder-only model's stages (GPT-2): each session is one
// group of sequences, fed by CausalInputs through CausalLmSession, exactly as the whole model
// feeds itself. The chain must outlive the model and its sessions.
class ChainedCausalLm : public generation::GenerativeModel {
 public:
  explicit ChainedCausalLm(StageChain& chain);  // InvalidArgument for a model not decoder-only
  std::unique_ptr<generation::DecodeSession> start(
      const std::vector<std::vector<int64_t>>& prompts) override;
  bool is_encoder_decoder() const override { return false; }
  int64_t vocab_size() const override { return info_.vocab_size; }

 private:
  StageChain& chain_;
  CausalLmInfo info_;
};

// generate() over a chain of an encoder-decoder model's stages (T5, MT5): each session is one
// group of sequences, fed by Seq2SeqInputs through Seq2SeqLmSession, as the pipeline's groups
// are (actors/jobs/model_jobs.h). The chain must outlive the model and its sessions.
class ChainedSeq2SeqLm : public generation::GenerativeModel {
 public:
  explicit ChainedSeq2SeqLm(StageChain& chain);  // InvalidArgument for a model not encoder-decoder
  std::unique_ptr<generation::DecodeSession> start(
      const std::vector<std::vector<int64_t>>& prompts) override;
  bool is_encoder_decoder() const override { return true; }
  int64_t decoder_start_token_id() const override { return info_.decoder_start_id; }
  int64_t vocab_size() const override { return info_.vocab_size; }

 private:
  StageChain& chain_;
  Seq2SeqLmInfo info_;
};

}  // namespace libai::models::stages
