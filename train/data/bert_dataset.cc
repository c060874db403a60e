#include "train/data/bert_dataset.h"

#include <algorithm>
#include <cmath>

#include "train/data/sample_rng.h"

namespace libai::train::data {

BertDataset::BertDataset(std::shared_ptr<const TokenSource> sentences,
                         std::vector<int64_t> document_indices, BertDatasetOptions options)
    : sentences_(std::move(sentences)), options_(options) {
  LIBAI_CHECK(sentences_ != nullptr, "BertDataset: no sentences");
  LIBAI_CHECK(options_.seq_length >= 5, "BertDataset: seq_length ", options_.seq_length,
              " leaves no room for two segments and [CLS] [SEP] [SEP]");
  LIBAI_CHECK(options_.vocab_size > 0, "BertDataset: vocab_size should be > 0");
  LIBAI_CHECK(document_indices.size() >= 2 && document_indices.front() == 0 &&
                  document_indices.back() == sentences_->size(),
              "BertDataset: document_indices should start at 0 and end at the sentence count ",
              sentences_->size());
  const int64_t max_tokens = options_.seq_length - 3;
  for (size_t d = 0; d + 1 < document_indices.size(); ++d) {
    const int64_t doc_begin = document_indices[d], doc_end = document_indices[d + 1];
    LIBAI_CHECK(doc_begin <= doc_end, "BertDataset: document_indices decrease at ", d);
    int64_t begin = doc_begin, tokens = 0;
    for (int64_t s = doc_begin; s < doc_end; ++s) {
      tokens += sentences_->length(s);
      if (tokens >= max_tokens || s + 1 == doc_end) {
        if (s + 1 - begin >= 2) chunks_.push_back({begin, s + 1});
        begin = s + 1;
        tokens = 0;
      }
    }
  }
  LIBAI_CHECK(!chunks_.empty(), "BertDataset: no document has two sentences to pair");
  size_ = options_.num_samples > 0 ? options_.num_samples : int64_t(chunks_.size());
}

models::TensorMap BertDataset::get(int64_t index) const {
  LIBAI_CHECK(index >= 0 && index < size_, "BertDataset: sample ", index, " out of range [0, ",
              size_, ")");
  SampleRng rng(options_.seed, "bert_pretraining", index);
  const Chunk& chunk = chunks_[size_t(index % int64_t(chunks_.size()))];
  const int64_t n = chunk.end - chunk.begin;
  const int64_t split = chunk.begin + 1 + rng.below(n - 1);
  std::vector<int64_t> a, b;
  for (int64_t s = chunk.begin; s < chunk.end; ++s) {
    auto t = sentences_->get(s, 0, -1);
    (s < split ? a : b).insert((s < split ? a : b).end(), t.begin(), t.end());
  }
  const bool random_next = rng.uniform() < 0.5;
  if (random_next) std::swap(a, b);
  const int64_t max_tokens = options_.seq_length - 3;
  while (int64_t(a.size() + b.size()) > max_tokens) {
    auto& longer = a.size() > b.size() ? a : b;
    if (rng.uniform() < 0.5)
      longer.erase(longer.begin());
    else
      longer.pop_back();
  }
  LIBAI_CHECK(!a.empty() && !b.empty(), "BertDataset: sample ", index,
              " has an empty segment (chunk of sentences ", chunk.begin, "..", chunk.end, ")");

  const auto& special = options_.tokens;
  std::vector<int64_t> ids{special.cls}, types{0};
  for (int64_t t : a) ids.push_back(t), types.push_back(0);
  ids.push_back(special.sep), types.push_back(0);
  for (int64_t t : b) ids.push_back(t), types.push_back(1);
  ids.push_back(special.sep), types.push_back(1);
  const int64_t length = int64_t(ids.size());

  // Masked LM over the non-special positions.
  std::vector<int64_t> candidates;
  for (int64_t p = 1; p < length - 1; ++p)
    if (p != int64_t(a.size()) + 1) candidates.push_back(p);
  const int64_t to_predict = std::min<int64_t>(
      int64_t(candidates.size()),
      std::max<int64_t>(1, int64_t(std::nearbyint(double(length) * options_.masked_lm_prob))));
  rng.shuffle(candidates);
  candidates.resize(size_t(to_predict));
  std::sort(candidates.begin(), candidates.end());
  std::vector<int64_t> labels(size_t(options_.seq_length), -100);
  for (int64_t p : candidates) {
    labels[size_t(p)] = ids[size_t(p)];
    const double r = rng.uniform();
    if (r < 0.8)
      ids[size_t(p)] = special.mask;
    else if (r >= 0.9)
      ids[size_t(p)] = rng.below(options_.vocab_size);
  }

  std::vector<int64_t> mask(size_t(options_.seq_length), 0);
  std::fill(mask.begin(), mask.begin() + length, 1);
  ids.resize(size_t(options_.seq_length), special.pad);
  types.resize(size_t(options_.seq_length), 0);
  return {{"input_ids", Tensor::from_vector(ids)},
          {"token_type_ids", Tensor::from_vector(types)},
          {"attention_mask", Tensor::from_vector(mask)},
          {"labels", Tensor::from_vector(labels)},
          {"next_sentence_label", Tensor::from_vector(std::vector<int64_t>{random_next}, {})}};
}

}  // namespace libai::train::data
