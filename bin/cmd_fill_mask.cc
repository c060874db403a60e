// `libai-actor fill-mask --model DIR --text "Paris is the [MASK] of France." [--top-k K] [--json]`:
// the top-k guesses for every mask token of the text (pipelines::fill_mask), best first. The
// mask token is the tokenizer's own ([MASK] for BERT, <mask> for RoBERTa).
//
//   --json: {"masks": [[{"token_id": 3007, "token": "capital", "score": 0.9,
//                        "sequence": "paris is the capital of france."}, ...], ...]}
//           (one list per mask token, in text order)
#include <cstdio>
#include <memory>
#include <string>

#include "bin/commands.h"
#include "bin/model_args.h"

namespace libai::cli {
namespace {

struct FillMaskOptions {
  ModelFlags model;
  std::string text;
  int64_t top_k = 5;
  bool json = false;
};

int fill_mask(const FillMaskOptions& options) {
  auto m = load_text_model(options.model, "fill-mask", {models::Task::masked_lm});
  const auto masks = models::pipelines::fill_mask(m, options.text, options.top_k);
  if (!options.model.leader) return kExitOk;  // rank 0 prints
  if (options.json) {
    Json all = Json::array();
    for (const auto& guesses : masks) {
      Json list = Json::array();
      for (const auto& g : guesses)
        list.push_back({{"token_id", g.token_id},
                        {"token", g.token},
                        {"score", g.score},
                        {"sequence", g.sequence}});
      all.push_back(list);
    }
    print_json({{"masks", all}});
    return kExitOk;
  }
  std::printf("%s\n", in_quotes(options.text).c_str());
  for (size_t i = 0; i < masks.size(); ++i) {
    if (masks.size() > 1) std::printf("mask %zu:\n", i);
    for (const auto& g : masks[i])
      std::printf("  %.4f  %s (id %lld)  %s\n", g.score, in_quotes(g.token).c_str(),
                  static_cast<long long>(g.token_id), in_quotes(g.sequence).c_str());
  }
  return kExitOk;
}

}  // namespace

CommandAction setup_fill_mask(CLI::App& command) {
  auto options = std::make_shared<FillMaskOptions>();
  add_model_flags(command, options->model);
  command.add_option("--text", options->text, "text with one or more mask tokens")->required();
  command.add_option("--top-k", options->top_k, "guesses per mask token")
      ->check(CLI::PositiveNumber);
  command.add_flag("--json", options->json, "print one JSON document");
  return on_ranks(options, [](FillMaskOptions& o) { return fill_mask(o); });
}

}  // namespace libai::cli
