// Megatron's GPTDataset: documents packed into samples of seq_length + 1 tokens that overlap by
// one token, in Megatron's order for the same seed (Note [Megatron's GPT sample order]).
//
//   data::GptDataset dataset(source, {.seq_length = 1024, .num_samples = 8000, .seed = 1234});
//   auto sample = dataset.get(0);
//   sample.at("input_ids");        // [1024] i64: tokens[0, 1024) of the packed sample
//   sample.at("shifted_labels");   // [1024] i64: tokens[1, 1025), position j's target
//
// "shifted_labels" is the causal-LM target key of train/loss.h: position j predicts
// shifted_labels[j], so the last position has the sample's extra token as its target, as in
// Megatron (labels = text[1:], tokens = text[:-1]).
//
// Note [Megatron's GPT sample order]: with T tokens per epoch (the documents' lengths summed)
// and S = seq_length:
//  - epochs E: the smallest with E T >= num_samples S + 1;
//  - a separate final epoch when E > 1 and the samples taken from the last epoch,
//    num_samples - ((E - 1) T - 1) / S, are under int(0.8 ((T - 1) / S)): the last epoch's
//    documents are then shuffled on their own, and so are its samples;
//  - one numpy RandomState(seed) (Note [numpy's legacy shuffle]) shuffles, in this order: the
//    document index (the documents tiled E times, int32; first E - 1 epochs then the last when
//    separate), then the sample positions [0, first) and, when separate, [first, total);
//  - the sample index walks the shuffled documents: sample k starts at (document position,
//    offset) and takes S + 1 tokens, the next one starts at its last token; (E T - 1) / S
//    samples in all (a partial last one is dropped).
// Sample i reads sample position shuffle_index[i]. tools/make_gpt_index_fixture.py builds the
// same arrays with numpy; tests/train/data_gpt_dataset_test.cc compares them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "train/data/dataset.h"

namespace libai::train::data {

struct GptDatasetOptions {
  int64_t seq_length = 1024;
  int64_t num_samples = 0;         // requested (0: one epoch); size() may be larger
  uint32_t seed = 1234;            // Megatron's random_seed
  std::vector<int64_t> documents;  // sequence indices of this split; empty: all of the source
};

class GptDataset : public Dataset {
 public:
  GptDataset(std::shared_ptr<const TokenSource> source, GptDatasetOptions options);

  int64_t size() const override { return int64_t(shuffle_index_.size()); }
  models::TensorMap get(int64_t index) const override;
  // The packed seq_length + 1 tokens of sample `index`.
  std::vector<int64_t> tokens(int64_t index) const;

  // Megatron's index arrays (for checking against Megatron's).
  const std::vector<int32_t>& document_index() const { return document_index_; }
  const std::vector<int64_t>& sample_index() const { return sample_index_; }  // pairs, flat
  const std::vector<int64_t>& shuffle_index() const { return shuffle_index_; }
  int64_t num_epochs() const { return num_epochs_; }
  bool separate_final_epoch() const { return separate_final_epoch_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }

 private:
  std::shared_ptr<const TokenSource> source_;
  GptDatasetOptions options_;
  int64_t tokens_per_epoch_ = 0;
  int64_t num_epochs_ = 1;
  bool separate_final_epoch_ = false;
  std::vector<int32_t> document_index_;
  std::vector<int64_t> sample_index_;
  std::vector<int64_t> shuffle_index_;
};

}  // namespace libai::train::data
