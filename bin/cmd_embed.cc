// `libai-actor embed --model DIR --text TEXT [--text TEXT ...] [--json]`: sentence embeddings as
// sentence-transformers computes them for mean-pooling models (pipelines::embed): the last
// hidden state averaged over real tokens, scaled to unit length.
//
//   human: each text with its first dims and norm, then the cosine similarity matrix (>= 2 texts)
//   --json: {"embeddings": [[...], ...], "similarity": [[...], ...]}
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bin/commands.h"
#include "bin/model_args.h"
#include "runtime/progress.h"

namespace libai::cli {
namespace {

namespace pipelines = models::pipelines;
using models::Task;

struct EmbedOptions {
  ModelFlags model;
  std::vector<std::string> texts;
  size_t batch_size = 32;
  bool json = false;
};

double norm(const std::vector<float>& v) {
  double total = 0;
  for (float x : v) total += double(x) * x;
  return std::sqrt(total);
}

int embed(const EmbedOptions& options) {
  auto m = load_text_model(
      options.model, "embed",
      {Task::encoder, Task::masked_lm, Task::sequence_classification, Task::causal_lm});
  // Batches of batch_size texts, longest first, with a progress line when there is more than one.
  Progress progress("embed", int64_t(options.texts.size()), "text");
  pipelines::EmbedOptions embedding;
  embedding.batch_size = options.batch_size;
  if (options.texts.size() > options.batch_size && options.model.leader)
    embedding.on_batch = [&](size_t texts) { progress.advance(int64_t(texts)); };
  const auto vectors = pipelines::embed(m, options.texts, embedding);
  std::vector<std::vector<double>> similarity(vectors.size(), std::vector<double>(vectors.size()));
  for (size_t i = 0; i < vectors.size(); ++i)
    for (size_t j = 0; j < vectors.size(); ++j)
      similarity[i][j] = pipelines::cosine(vectors[i], vectors[j]);

  if (!options.model.leader) return kExitOk;  // rank 0 prints
  if (options.json) {
    print_json({{"embeddings", vectors}, {"similarity", similarity}});
    return kExitOk;
  }
  const size_t dims = vectors.empty() ? 0 : vectors[0].size();
  for (size_t i = 0; i < vectors.size(); ++i)
    std::printf("[%zu] %s\n    %zu dims, norm %.4f, %s\n", i, in_quotes(options.texts[i]).c_str(),
                dims, norm(vectors[i]), format_values(vectors[i], 6).c_str());
  if (vectors.size() < 2) return kExitOk;
  std::printf("\ncosine similarity:\n     ");
  for (size_t j = 0; j < vectors.size(); ++j)
    std::printf(" %7s", ("[" + std::to_string(j) + "]").c_str());
  std::printf("\n");
  for (size_t i = 0; i < vectors.size(); ++i) {
    std::printf("%5s", ("[" + std::to_string(i) + "]").c_str());
    for (double s : similarity[i]) std::printf(" %7.4f", s);
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace

CommandAction setup_embed(CLI::App& command) {
  auto options = std::make_shared<EmbedOptions>();
  add_model_flags(command, options->model);
  command.add_option("--text", options->texts, "text to embed (repeatable)")
      ->required()
      ->allow_extra_args(false);
  command.add_option("--batch-size", options->batch_size, "texts per forward pass")
      ->check(CLI::PositiveNumber);
  command.add_flag("--json", options->json, "print one JSON document");
  return on_ranks(options, [](EmbedOptions& o) { return embed(o); });
}

}  // namespace libai::cli
