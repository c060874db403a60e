// Datasets for training: a sample is a TensorMap under the model's input names plus the labels
// its loss head takes (train/loss.h); `collate` stacks samples into a micro-batch.
//
//   auto source = std::make_shared<data::InMemoryTokenSource>(documents);  // or an adapter
//   data::GptDataset dataset(source, {.seq_length = 1024, .num_samples = 8000, .seed = 1234});
//   models::TensorMap sample = dataset.get(17);      // input_ids [1024], shifted_labels [1024]
//   models::TensorMap batch = data::collate({dataset.get(0), dataset.get(1)});  // [2, 1024]
//
// Token datasets read through TokenSource, a minimal view of tokenized sequences (Megatron's
// indexed dataset gets an adapter), so they can be tested on sequences held in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/model.h"

namespace libai::train::data {

// Tokenized sequences (documents or sentences), random access.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;                 // number of sequences
  virtual int64_t length(int64_t index) const = 0;  // tokens in sequence `index`
  // Tokens [offset, offset + count) of sequence `index`; count -1: to its end.
  virtual std::vector<int64_t> get(int64_t index, int64_t offset, int64_t count) const = 0;
};

// Sequences held in memory (tests, small corpora).
class InMemoryTokenSource : public TokenSource {
 public:
  explicit InMemoryTokenSource(std::vector<std::vector<int64_t>> sequences)
      : sequences_(std::move(sequences)) {}
  int64_t size() const override { return int64_t(sequences_.size()); }
  int64_t length(int64_t index) const override;
  std::vector<int64_t> get(int64_t index, int64_t offset, int64_t count) const override;

 private:
  std::vector<std::vector<int64_t>> sequences_;
};

// A map-style dataset: sample `index` in [0, size()), the same sample for the same index.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual models::TensorMap get(int64_t index) const = 0;
};

// Stacks samples along a new leading batch dimension: every sample must have the same keys, and
// each key the same shape and dtype in every sample (the error names the key and the sample).
models::TensorMap collate(const std::vector<models::TensorMap>& samples);

// The samples at `indices`, collated.
models::TensorMap make_batch(const Dataset& dataset, const std::vector<int64_t>& indices);

}  // namespace libai::train::data
