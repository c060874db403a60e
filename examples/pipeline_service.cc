// A C++ service that embeds the actor runtime: it loads a GPT-2 family model folder as a
// two-stage pipeline in this process (two stage actors, each on its own thread and device),
// keeps two groups of prompts in flight, and prints the generated token ids.
//
//   pipeline_service tests/data/models/gpt2 "Hello, my name is" "The quick brown fox"
#include <caf/all.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "actors/jobs/model_jobs.h"
#include "models/hf_config.h"
#include "models/tokenizers/tokenizer.h"

int main(int argc, char** argv) {
  using namespace libai;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR PROMPT [PROMPT...]\n", argv[0]);
    return 2;
  }
  try {
    const std::string folder = argv[1];
    auto tokenizer = tokenizers::load_tokenizer(folder);
    std::vector<std::vector<int64_t>> prompts;
    for (int i = 2; i < argc; ++i) {
      auto ids = tokenizer->encode(argv[i]).ids;
      prompts.emplace_back(ids.begin(), ids.end());
    }
    const auto config = models::HfConfig::load(folder);
    const int layers = models::stages::pipeline_num_layers(config);
    std::vector<int> stage_of;  // first half of the layers on stage 0, the rest on stage 1
    for (int l = 0; l < layers; ++l) stage_of.push_back(l < (layers + 1) / 2 ? 0 : 1);

    caf::actor_system_config cfg;
    actors::configure_actor_system(cfg);
    caf::actor_system system(cfg);
    const int groups = std::min<int>(2, int(prompts.size()));
    actors::PipelineLayout layout = actors::make_layout({.dp = 1, .pp = 2, .tp = 1}, groups);
    actors::LocalPipeline pipeline(system, layout,
                                   actors::model_stage_factory(folder, layout, stage_of));

    models::generation::GenerationConfig generation;
    generation.max_new_tokens = 8;
    auto results = actors::run_generation(pipeline.client(), layout,
                                          models::stages::causal_lm_info(config),
                                          actors::split_into_groups(prompts, groups), generation);
    for (const auto& report : pipeline.wait())
      std::printf("%s: %llu actions, %.3f s busy\n", report.name.c_str(),
                  static_cast<unsigned long long>(report.actions), report.busy_seconds);
    for (const auto& group : results)
      for (const auto& per_prompt : group) {
        const auto& tokens = per_prompt[0].tokens;
        std::printf("%s\n", tokenizer->decode(std::vector<int32_t>(tokens.begin(), tokens.end()), true).c_str());
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_service: %s\n", e.what());
    return 1;
  }
  return 0;
}
