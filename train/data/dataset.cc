#include "train/data/dataset.h"

#include <cstring>

namespace libai::train::data {

int64_t InMemoryTokenSource::length(int64_t index) const {
  LIBAI_CHECK(index >= 0 && index < size(), "InMemoryTokenSource: sequence ", index,
              " out of range [0, ", size(), ")");
  return int64_t(sequences_[size_t(index)].size());
}

std::vector<int64_t> InMemoryTokenSource::get(int64_t index, int64_t offset, int64_t count) const {
  const int64_t n = length(index);
  if (count < 0) count = n - offset;
  LIBAI_CHECK(offset >= 0 && count >= 0 && offset + count <= n, "InMemoryTokenSource: tokens [",
              offset, ", ", offset + count, ") of sequence ", index, " (", n, " tokens)");
  const auto& s = sequences_[size_t(index)];
  return {s.begin() + offset, s.begin() + offset + count};
}

models::TensorMap collate(const std::vector<models::TensorMap>& samples) {
  LIBAI_CHECK(!samples.empty(), "collate: no samples");
  const models::TensorMap& first = samples.front();
  for (size_t i = 1; i < samples.size(); ++i) {
    const auto& s = samples[i];
    LIBAI_CHECK(s.size() == first.size(), "collate: sample ", i, " has ", s.size(),
                " keys, sample 0 has ", first.size());
    for (const auto& [key, t] : first) {
      auto it = s.find(key);
      LIBAI_CHECK(it != s.end(), "collate: sample ", i, " has no \"", key, "\"");
      LIBAI_CHECK(it->second.shape() == t.shape() && it->second.dtype() == t.dtype(), "collate: \"",
                  key, "\" of sample ", i, " is ", shape_str(it->second.shape()), " ",
                  it->second.dtype(), ", sample 0's is ", shape_str(t.shape()), " ", t.dtype());
    }
  }
  models::TensorMap batch;
  const int64_t n = int64_t(samples.size());
  for (const auto& [key, t] : first) {
    LIBAI_CHECK(t.device().is_cpu(), "collate: \"", key, "\" is not on the CPU");
    Shape shape{n};
    shape.insert(shape.end(), t.shape().begin(), t.shape().end());
    Tensor out = Tensor::empty(shape, t.dtype());
    char* dst = static_cast<char*>(out.data_ptr());
    const size_t bytes = t.nbytes();
    for (int64_t i = 0; i < n; ++i) {
      const Tensor& src = samples[size_t(i)].at(key);
      if (src.is_contiguous()) {
        std::memcpy(dst + size_t(i) * bytes, src.data_ptr(), bytes);
      } else {
        Tensor row =
            out.as_strided(t.shape(), contiguous_strides(t.shape()), out.offset() + i * t.numel());
        row.copy_from(src);
      }
    }
    batch.emplace(key, std::move(out));
  }
  return batch;
}

models::TensorMap make_batch(const Dataset& dataset, const std::vector<int64_t>& indices) {
  std::vector<models::TensorMap> samples;
  samples.reserve(indices.size());
  for (int64_t i : indices) samples.push_back(dataset.get(i));
  return collate(samples);
}

}  // namespace libai::train::data
