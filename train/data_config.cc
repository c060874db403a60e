#include "train/data_config.h"

#include <cmath>
#include <filesystem>
#include <numeric>

#include "models/vision/image.h"
#include "runtime/error.h"
#include "train/data/bert_dataset.h"
#include "train/data/gpt_dataset.h"
#include "train/data/image_folder_dataset.h"
#include "train/data/indexed_source.h"
#include "train/data/t5_dataset.h"

namespace libai::train {
namespace {

std::string where(const config::Config& cfg, const std::string& key) {
  const config::Node* node = cfg.root().find_path(key);
  return node ? node->describe() : "key '" + key + "'";
}

// Megatron's get_train_valid_test_split_: contiguous ranges of `count` by normalised weights.
std::vector<int64_t> split_points(const config::Config& cfg, int64_t count) {
  auto weights = cfg.get_or<std::vector<double>>("data.splits", {949.0, 50.0, 1.0});
  LIBAI_CHECK(!weights.empty() && weights.size() <= 3, where(cfg, "data.splits"),
              ": expected 1 to 3 weights (train, validation, test)");
  weights.resize(3, 0.0);
  double total = 0;
  for (double w : weights) {
    LIBAI_CHECK(w >= 0, where(cfg, "data.splits"), ": weights must be >= 0");
    total += w;
  }
  LIBAI_CHECK(total > 0, where(cfg, "data.splits"), ": the weights sum to 0");
  std::vector<int64_t> points{0};
  for (double w : weights)
    points.push_back(points.back() + int64_t(std::llround(w / total * double(count))));
  const int64_t excess = points.back() - count;
  for (size_t i = 1; i < points.size(); ++i) points[i] -= excess;
  return points;
}

std::vector<int64_t> range(int64_t begin, int64_t end) {
  std::vector<int64_t> out(size_t(std::max<int64_t>(0, end - begin)));
  std::iota(out.begin(), out.end(), begin);
  return out;
}

std::shared_ptr<data::IndexedTokenSource> open_source(const config::Config& cfg) {
  const auto prefix = cfg.get_or<std::optional<std::string>>("data.prefix", std::nullopt).value_or("");
  LIBAI_CHECK(!prefix.empty(), where(cfg, "data"),
              ": data.prefix (an indexed dataset, made by `libai-actor preprocess`) is required");
  return std::make_shared<data::IndexedTokenSource>(data::IndexedDataset::open(prefix));
}

DataSplits gpt_data(const config::Config& cfg, const DataNeeds& needs) {
  auto source = open_source(cfg);
  const auto points = split_points(cfg, source->size());
  data::GptDatasetOptions options;
  options.seq_length = cfg.get_or<int64_t>("data.seq_length", 1024);
  options.seed = uint32_t(cfg.get_or<std::optional<int64_t>>("data.seed", std::nullopt).value_or(int64_t(needs.seed)));
  DataSplits out;
  options.documents = range(points[0], points[1]);
  LIBAI_CHECK(!options.documents.empty(), where(cfg, "data.splits"), ": the training split of ",
              source->size(), " documents is empty");
  options.num_samples = needs.train_samples;
  out.train = std::make_shared<data::GptDataset>(source, options);
  options.documents = range(points[1], points[2]);
  if (!options.documents.empty()) {
    options.num_samples = needs.validation_samples;
    out.validation = std::make_shared<data::GptDataset>(source, options);
  }
  return out;
}

DataSplits bert_data(const config::Config& cfg, const models::HfConfig& model_config,
                     const DataNeeds& needs) {
  auto source = open_source(cfg);
  const auto& documents = source->dataset().document_indices();  // 0, then each document's end
  const int64_t count = int64_t(documents.size()) - 1;
  const auto points = split_points(cfg, count);
  data::BertDatasetOptions options;
  options.seq_length = cfg.get_or<int64_t>("data.seq_length", 512);
  options.vocab_size = model_config.require_int("vocab_size");
  options.tokens.cls = cfg.get_or<int64_t>("data.cls_id", 101);
  options.tokens.sep = cfg.get_or<int64_t>("data.sep_id", 102);
  options.tokens.mask = cfg.get_or<int64_t>("data.mask_id", 103);
  options.tokens.pad =
      cfg.get_or<int64_t>("data.pad_id", model_config.get_int("pad_token_id", 0));
  options.masked_lm_prob = cfg.get_or<double>("data.masked_lm_prob", 0.15);
  options.seed = uint64_t(cfg.get_or<std::optional<int64_t>>("data.seed", std::nullopt).value_or(int64_t(needs.seed)));
  auto split = [&](int64_t a, int64_t b) {
    return std::vector<int64_t>(documents.begin() + a, documents.begin() + b + 1);
  };
  DataSplits out;
  options.num_samples = needs.train_samples;
  out.train = std::make_shared<data::BertDataset>(source, split(points[0], points[1]), options);
  if (points[2] > points[1]) {
    options.num_samples = needs.validation_samples;
    out.validation =
        std::make_shared<data::BertDataset>(source, split(points[1], points[2]), options);
  }
  return out;
}

DataSplits t5_data(const config::Config& cfg, const models::HfConfig& model_config, const DataNeeds& needs) {
  auto source = open_source(cfg);
  data::T5DatasetOptions options;
  options.inputs_length = cfg.get_or<int64_t>("data.seq_length", 512);
  options.noise_density = cfg.get_or<double>("data.noise_density", 0.15);
  options.mean_noise_span_length = cfg.get_or<double>("data.mean_noise_span_length", 3.0);
  options.sentinel_start =
      cfg.get_or<std::optional<int64_t>>("data.sentinel_start", std::nullopt)
          .value_or(model_config.require_int("vocab_size") - 1);
  options.eos_id = cfg.get_or<int64_t>("data.eos_id", model_config.get_int("eos_token_id", 1));
  options.pad_id = cfg.get_or<int64_t>("data.pad_id", model_config.get_int("pad_token_id", 0));
  options.seed = uint64_t(cfg.get_or<std::optional<int64_t>>("data.seed", std::nullopt).value_or(int64_t(needs.seed)));
  options.num_samples = needs.train_samples;
  DataSplits out;
  out.train = std::make_shared<data::T5SpanCorruptionDataset>(source, options);
  return out;
}

DataSplits image_data(const config::Config& cfg, const models::HfConfig& model_config) {
  const auto path = cfg.get_or<std::optional<std::string>>("data.path", std::nullopt).value_or("");
  LIBAI_CHECK(!path.empty(), where(cfg, "data"),
              ": data.path (a folder of class folders of images) is required");
  // The model folder's preprocessor_config.json, else ViT's defaults at the model's image size.
  vision::ImageProcessor processor;
  const std::filesystem::path weights = cfg.get_or<std::string>("model.weights", "");
  if (!weights.empty() && std::filesystem::exists(weights / "preprocessor_config.json")) {
    processor = vision::ImageProcessor::load(weights);
  } else {
    processor.height = processor.width = model_config.get_int("image_size", 224);
  }
  DataSplits out;
  out.shuffle = true;
  out.train = std::make_shared<data::ImageFolderDataset>(path, processor);
  const auto validation =
      cfg.get_or<std::optional<std::string>>("data.validation_path", std::nullopt).value_or("");
  if (!validation.empty())
    out.validation = std::make_shared<data::ImageFolderDataset>(validation, processor);
  return out;
}

}  // namespace

DataSplits build_data(const config::Config& cfg, const models::Model& model,
                      const DataNeeds& needs) {
  return build_data(cfg, model.config(), needs);
}

DataSplits build_data(const config::Config& cfg, const models::HfConfig& model_config,
                      const DataNeeds& needs) {
  const auto target = cfg.get_or<std::string>("data._target_", "");
  if (target == "gpt") return gpt_data(cfg, needs);
  if (target == "bert") return bert_data(cfg, model_config, needs);
  if (target == "t5") return t5_data(cfg, model_config, needs);
  if (target == "image_folder") return image_data(cfg, model_config);
  // The names are listed once, in the schema (app/schema.cc), which refuses any other at load.
  LIBAI_THROW(InvalidArgument, where(cfg, "data._target_"), ": no dataset is built for '",
              target, "' (the schema's data._target_ lists the datasets)");
}

}  // namespace libai::train
