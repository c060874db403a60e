#include "models/stages/chain.h"

namespace libai::models::stages {

StageChain::StageChain(std::vector<std::unique_ptr<PipelineStage>> stages, HfConfig config)
    : stages_(std::move(stages)), config_(std::move(config)) {
  LIBAI_CHECK(!stages_.empty(), "StageChain: no stages");
  int next = 0;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const StageSpec& s = stages_[i]->spec();
    LIBAI_CHECK(s.first_layer == next && s.num_layers == stages_[0]->spec().num_layers,
                "StageChain: stage ", i, " holds ", to_string(s),
                "; expected it to start at layer ", next, " of ", stages_[0]->spec().num_layers);
    next = s.last_layer;
  }
  LIBAI_CHECK(stages_.back()->spec().is_last(), "StageChain: the stages end at layer ", next,
              " of ", stages_.back()->spec().num_layers);
}

StageChain StageChain::load(const std::filesystem::path& folder,
                            const std::vector<StageSpec>& specs, const LoadOptions& options) {
  std::vector<std::unique_ptr<PipelineStage>> stages;
  for (const StageSpec& spec : specs) stages.push_back(load_stage(folder, spec, options));
  return StageChain(std::move(stages), HfConfig::load(folder));
}

ChainState StageChain::new_states() const {
  ChainState states;
  for (const auto& stage : stages_) states.push_back(stage->new_state());
  return states;
}

Activations StageChain::forward(const Activations& in, ChainState& states) {
  LIBAI_CHECK(states.size() == stages_.size(), "StageChain: ", states.size(), " states for ",
              stages_.size(), " stages");
  Activations x = in;
  for (size_t i = 0; i < stages_.size(); ++i) x = stages_[i]->forward(x, *states[i]);
  return x;
}

ChainedCausalLm::ChainedCausalLm(StageChain& chain)
    : chain_(chain), info_(causal_lm_info(chain.config())) {}

namespace {

void check_vocabulary(const StageChain& chain, const std::vector<std::vector<int64_t>>& prompts,
                      int64_t vocab_size) {
  for (const auto& p : prompts)
    for (int64_t id : p)
      LIBAI_CHECK(id >= 0 && id < vocab_size, chain.config().path(), ": token id ", id,
                  " outside the vocabulary of ", vocab_size);
}

}  // namespace

std::unique_ptr<generation::DecodeSession> ChainedCausalLm::start(
    const std::vector<std::vector<int64_t>>& prompts) {
  check_vocabulary(chain_, prompts, info_.vocab_size);
  auto states = std::make_shared<ChainState>(chain_.new_states());
  return std::make_unique<CausalLmSession>(prompts, info_.pad_id,
                                           [chain = &chain_, states](const Activations& in) {
                                             return chain->forward(in, *states).at("logits");
                                           });
}

ChainedSeq2SeqLm::ChainedSeq2SeqLm(StageChain& chain)
    : chain_(chain), info_(seq2seq_lm_info(chain.config())) {}

std::unique_ptr<generation::DecodeSession> ChainedSeq2SeqLm::start(
    const std::vector<std::vector<int64_t>>& prompts) {
  check_vocabulary(chain_, prompts, info_.vocab_size);
  auto states = std::make_shared<ChainState>(chain_.new_states());
  return std::make_unique<Seq2SeqLmSession>(prompts, info_.pad_id, info_.decoder_start_id,
                                            [chain = &chain_, states](const Activations& in) {
                                              return chain->forward(in, *states).at("logits");
                                            });
}

}  // namespace libai::models::stages
