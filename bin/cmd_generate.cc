// `libai-actor generate --model DIR (--prompt TEXT ... | --prompt-ids 1,2,3 ...) [...]`: text
// generation with greedy search, sampling or beam search (models/generation/generate.h). Every
// --prompt / --prompt-ids is one prompt of the batch; eos and pad default to the folder's
// generation_config.json / config.json.
//
//   --json: {"sequences": [{"prompt": "Hello" | [1, 2, 3], "token_ids": [...], "text": "..."}]}
//
// token_ids are the prompt followed by the new tokens for decoder-only models, the new tokens
// alone for encoder-decoder models (whose prompt is the encoder's input); text is the decoded
// new tokens. With --num-return-sequences R each prompt has R entries, best first.
//
// A folder without tokenizer files still generates from --prompt-ids, as transformers does; the
// text is then left out (no "text" key, no "->" line), and --prompt is refused naming the folder.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bin/commands.h"
#include "bin/model_args.h"
#include "runtime/autograd.h"

namespace libai::cli {
namespace {

namespace pipelines = models::pipelines;

struct GenerateOptions {
  ModelFlags model;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  int64_t pad_token_id = -1;  // -1: the folder's
  models::generation::GenerationConfig config;
  bool json = false;
};

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

// `labels[p]` shows prompt p; `skip[p]` prompt tokens lead its token_ids (0 for seq2seq).
void print_human(const std::vector<pipelines::GeneratedText>& results,
                 const std::vector<std::string>& labels, const std::vector<size_t>& skip,
                 bool with_text) {
  const size_t per_prompt = results.size() / labels.size();
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const size_t p = i / per_prompt;
    if (i % per_prompt == 0) std::printf("%sprompt %zu: %s\n", i ? "\n" : "", p, labels[p].c_str());
    const std::string label =
        per_prompt > 1 ? "  sequence " + std::to_string(i % per_prompt) + " " : "  ";
    const size_t start = std::min(skip[p], r.token_ids.size());
    const std::vector<int64_t> new_ids(r.token_ids.begin() + long(start), r.token_ids.end());
    if (with_text) {
      std::printf("%s-> %s\n", label.c_str(), in_quotes(r.text).c_str());
      std::printf("     new token ids %s  (score %.4f)\n", ids_text(new_ids).c_str(), r.score);
    } else {  // no tokenizer: the ids are the answer
      std::printf("%s-> new token ids %s  (score %.4f)\n", label.c_str(), ids_text(new_ids).c_str(),
                  r.score);
    }
  }
}

int generate(GenerateOptions& options) {
  LIBAI_CHECK(!options.prompts.empty() || !options.prompt_ids.empty(),
              "generate: give at least one --prompt TEXT or --prompt-ids 1,2,3");
  const auto prompt_ids = parse_id_lists(options.prompt_ids, "--prompt-ids");
  auto m = load_text_model(options.model, "generate",
                           {models::Task::causal_lm, models::Task::seq2seq_lm});
  LIBAI_CHECK_KIND(NotFound, options.prompts.empty() || m.has_tokenizer(),
                   "generate --prompt needs a tokenizer and ", options.model.folder,
                   " has none (tokenizer.json, vocab.json + merges.txt, vocab.txt, spiece.model or "
                   "tokenizer.model); --prompt-ids works without one");
  check_ids_in_vocab(m.model(), prompt_ids, options.prompt_ids, "--prompt-ids");
  if (options.pad_token_id >= 0) options.config.pad_token_id = options.pad_token_id;
  autograd::NoGradGuard no_grad;
  const auto results = prompt_ids.empty()
                           ? pipelines::generate_text(m, options.prompts, options.config)
                           : pipelines::generate_ids(m, prompt_ids, options.config);
  const size_t prompts = prompt_ids.empty() ? options.prompts.size() : prompt_ids.size();
  const bool encoder_decoder = m.model().task() == models::Task::seq2seq_lm;
  if (!options.model.leader) return kExitOk;  // rank 0 prints
  if (!options.json) {
    std::vector<std::string> labels;
    std::vector<size_t> skip;
    for (size_t p = 0; p < prompts; ++p) {
      const bool ids = !prompt_ids.empty();
      labels.push_back(ids ? ids_text(prompt_ids[p]) : in_quotes(options.prompts[p]));
      skip.push_back(encoder_decoder ? 0
                     : ids           ? prompt_ids[p].size()
                                     : m.tokenizer().encode(options.prompts[p]).ids.size());
    }
    print_human(results, labels, skip, m.has_tokenizer());
    return kExitOk;
  }
  Json sequences = Json::array();
  const size_t per_prompt = results.size() / prompts;
  for (size_t i = 0; i < results.size(); ++i) {
    const size_t p = i / per_prompt;
    Json sequence = {{"prompt", prompt_ids.empty() ? Json(results[i].prompt) : Json(prompt_ids[p])},
                     {"token_ids", results[i].token_ids}};
    if (m.has_tokenizer()) sequence["text"] = results[i].text;
    sequences.push_back(std::move(sequence));
  }
  print_json({{"sequences", sequences}});
  return kExitOk;
}

}  // namespace

CommandAction setup_generate(CLI::App& command) {
  auto options = std::make_shared<GenerateOptions>();
  auto& config = options->config;
  add_model_flags(command, options->model);
  auto* prompt = command.add_option("--prompt", options->prompts, "prompt text (repeatable)")
                     ->allow_extra_args(false);
  command
      .add_option("--prompt-ids", options->prompt_ids, "prompt token ids, e.g. 1,2,3 (repeatable)")
      ->allow_extra_args(false)
      ->excludes(prompt);
  command.add_option("--max-new-tokens", config.max_new_tokens, "tokens to generate at most")
      ->check(CLI::NonNegativeNumber);
  command.add_option("--min-new-tokens", config.min_new_tokens, "no eos before this many tokens")
      ->check(CLI::NonNegativeNumber);
  command.add_flag("--do-sample", config.do_sample, "sample instead of greedy / beam search");
  command.add_option("--temperature", config.temperature, "sampling temperature (> 0)")
      ->check(CLI::PositiveNumber);
  command.add_option("--top-k", config.top_k, "sample from the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  command.add_option("--top-p", config.top_p, "nucleus sampling probability mass")
      ->check(CLI::Range(0.0, 1.0));
  command.add_option("--seed", config.seed, "sampling seed");
  command.add_option("--num-beams", config.num_beams, "beam search width (1: no beams)")
      ->check(CLI::PositiveNumber);
  command.add_option("--length-penalty", config.length_penalty, "beam score length exponent");
  command.add_flag("--early-stopping", config.early_stopping,
                   "stop a beam search once num_beams sequences are finished");
  command
      .add_option("--num-return-sequences", config.num_return_sequences,
                  "sequences returned per prompt")
      ->check(CLI::PositiveNumber);
  command
      .add_option("--repetition-penalty", config.repetition_penalty,
                  "penalty on tokens already present (1: off)")
      ->check(CLI::PositiveNumber);
  command
      .add_option("--no-repeat-ngram-size", config.no_repeat_ngram_size,
                  "forbid repeating n-grams of this size (0: off)")
      ->check(CLI::NonNegativeNumber);
  command
      .add_option("--eos-token-id", config.eos_token_ids,
                  "token ids that end a sequence (default: the folder's generation config)")
      ->check(CLI::NonNegativeNumber);
  command
      .add_option("--pad-token-id", options->pad_token_id,
                  "padding token id (default: the folder's, else the eos)")
      ->check(CLI::NonNegativeNumber);
  command.add_flag("--json", options->json, "print one JSON document");
  return on_ranks(options, [](GenerateOptions& o) { return generate(o); });
}

}  // namespace libai::cli
