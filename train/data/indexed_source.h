// An indexed dataset (.bin + .idx) as the TokenSource the token datasets read.
#pragma once

#include <memory>

#include "train/data/dataset.h"
#include "train/data/indexed_dataset.h"

namespace libai::train::data {

class IndexedTokenSource : public TokenSource {
 public:
  explicit IndexedTokenSource(IndexedDataset dataset) : dataset_(std::move(dataset)) {}
  int64_t size() const override { return dataset_.size(); }
  int64_t length(int64_t i) const override { return dataset_.length(i); }
  std::vector<int64_t> get(int64_t i, int64_t offset, int64_t count) const override {
    return dataset_.get(i, offset, count);
  }
  const IndexedDataset& dataset() const { return dataset_; }

 private:
  IndexedDataset dataset_;
};

}  // namespace libai::train::data
