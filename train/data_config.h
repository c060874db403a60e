// Datasets of a training run from its config's `data` section (docs/TRAINING.md, "Data"):
//
//   data:
//     _target_: gpt            # gpt | bert | t5 | image_folder
//     prefix: build/demo/shakespeare_text_document   # an indexed dataset (gpt, bert, t5)
//     seq_length: 128          # gpt: tokens per sample; bert: with [CLS]/[SEP]; t5: input tokens
//     splits: [949, 50, 1]     # train / validation / test weights over the documents (Megatron)
//     seed: 1234               # Megatron's data seed (shuffles); default: train.seed
//     # bert: cls_id, sep_id, mask_id, pad_id (default: the model's config / 101 102 103 0),
//     #       masked_lm_prob 0.15
//     # t5:   sentinel_start (id of <extra_id_0>; default vocab_size - 1), eos_id, pad_id,
//     #       noise_density 0.15, mean_noise_span_length 3
//     # image_folder: path (root/<class>/<images>), validation_path (optional)
//
// Samples are requested so that train_iter steps never run out (a GPT dataset builds as many
// epochs as that needs); the validation split gives what the evaluations take.
#pragma once

#include <memory>

#include "models/model.h"
#include "runtime/config/config.h"
#include "train/data/dataset.h"

namespace libai::train {

struct DataSplits {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> validation;  // null: no validation data
  bool shuffle = false;  // the sampler shuffles (image folders); token datasets come shuffled
};

struct DataNeeds {
  int64_t train_samples = 0;       // 0: one epoch
  int64_t validation_samples = 0;  // 0: one epoch
  uint64_t seed = 1234;
};

DataSplits build_data(const config::Config& cfg, const models::Model& model,
                      const DataNeeds& needs);
// The same from the model's config alone (all the data needs of the model).
DataSplits build_data(const config::Config& cfg, const models::HfConfig& model_config,
                      const DataNeeds& needs);

}  // namespace libai::train
