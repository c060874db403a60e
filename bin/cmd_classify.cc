// `libai-actor classify --model DIR (--text TEXT | --image FILE) [--top-k K] [--json]`: the label
// probabilities of a sequence-classification model for a text (pipelines::classify_text), or of
// an image-classification model (ViT) for an image file, preprocessed as the folder's
// preprocessor_config.json says (models/vision/image.h). Labels come from config.json's
// id2label (LABEL_i when absent), most likely first.
//
//   --json: {"labels": [{"label": "positive", "score": 0.71}, ...]}
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bin/commands.h"
#include "bin/model_args.h"
#include "models/vision/image.h"
#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::cli {
namespace {

namespace pipelines = models::pipelines;

struct ClassifyOptions {
  ModelFlags model;
  std::string text;
  std::string image;
  int64_t top_k = 5;
  bool json = false;
};

std::vector<pipelines::LabelScore> classify_image(const ClassifyOptions& options) {
  const Tensor rgb = vision::load_image(options.image);  // a bad file fails before loading
  auto model =
      load_bare_model(options.model, "classify --image", {models::Task::image_classification});
  const Tensor pixels = pixel_values(options.model.folder, rgb,
                                     parse_dtype_flag(options.model.dtype));  // [1, 3, h, w]
  autograd::NoGradGuard no_grad;
  const Tensor logits = model->forward({{"pixel_values", pixels}}).at("logits");  // [1, labels]
  return pipelines::scores_from_logits(*model, ops::select(logits, 0, 0));
}

int classify(const ClassifyOptions& options) {
  LIBAI_CHECK(!options.text.empty() || !options.image.empty(),
              "classify: give --text TEXT or --image FILE");
  std::vector<pipelines::LabelScore> scores;
  if (!options.image.empty()) {
    scores = classify_image(options);
  } else {
    auto m =
        load_text_model(options.model, "classify --text", {models::Task::sequence_classification});
    scores = pipelines::classify_text(m, options.text);
  }
  scores.resize(std::min(scores.size(), size_t(options.top_k)));
  if (!options.model.leader) return kExitOk;  // rank 0 prints
  if (options.json) {
    Json labels = Json::array();
    for (const auto& s : scores) labels.push_back({{"label", s.label}, {"score", s.score}});
    print_json({{"labels", labels}});
    return kExitOk;
  }
  std::printf("%s\n",
              options.image.empty() ? in_quotes(options.text).c_str() : options.image.c_str());
  for (const auto& s : scores) std::printf("  %.4f  %s\n", s.score, s.label.c_str());
  return kExitOk;
}

}  // namespace

CommandAction setup_classify(CLI::App& command) {
  auto options = std::make_shared<ClassifyOptions>();
  add_model_flags(command, options->model);
  auto* text = command.add_option("--text", options->text, "text to classify");
  command.add_option("--image", options->image, "image file to classify (PNG, JPEG, PPM, BMP)")
      ->excludes(text);
  command.add_option("--top-k", options->top_k, "labels to show, most likely first")
      ->check(CLI::PositiveNumber);
  command.add_flag("--json", options->json, "print one JSON document");
  return on_ranks(options, [](ClassifyOptions& o) { return classify(o); });
}

}  // namespace libai::cli
