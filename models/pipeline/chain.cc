#include "models/pipeline/chain.h"

namespace libai::models::pipeline {

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

std::unique_ptr<generation::DecodeSession> ChainedCausalLm::start(
    const std::vector<std::vector<int64_t>>& prompts) {
  for (const auto& p : prompts)
    for (int64_t id : p)
      LIBAI_CHECK(id >= 0 && id < info_.vocab_size, chain_.config().path(), ": token id ", id,
                  " outside the vocabulary of ", info_.vocab_size);
  auto states = std::make_shared<ChainState>(chain_.new_states());
  return std::make_unique<CausalLmSession>(prompts, info_.pad_id,
                                           [chain = &chain_, states](const Activations& in) {
                                             return chain->forward(in, *states).at("logits");
                                           });
}

}  // namespace libai::models::pipeline
