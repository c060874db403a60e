#include "train/data/gpt_dataset.h"

#include <numeric>

#include "train/data/numpy_random.h"

namespace libai::train::data {
namespace {

// The documents tiled `epochs` times, shuffled (Megatron's document index).
std::vector<int32_t> shuffled_documents(const std::vector<int64_t>& documents, int64_t epochs,
                                        NumpyRandomState& rng) {
  std::vector<int32_t> index;
  index.reserve(documents.size() * size_t(epochs));
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t d : documents) index.push_back(int32_t(d));
  rng.shuffle(index);
  return index;
}

std::vector<int64_t> shuffled_range(int64_t begin, int64_t end, NumpyRandomState& rng) {
  std::vector<int64_t> r(size_t(end - begin));
  std::iota(r.begin(), r.end(), begin);
  rng.shuffle(r);
  return r;
}

}  // namespace

GptDataset::GptDataset(std::shared_ptr<const TokenSource> source, GptDatasetOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  LIBAI_CHECK(source_ != nullptr, "GptDataset: no token source");
  const int64_t S = options_.seq_length;
  LIBAI_CHECK(S >= 1, "GptDataset: seq_length ", S, " should be >= 1");
  LIBAI_CHECK(options_.num_samples >= 0, "GptDataset: num_samples ", options_.num_samples,
              " is negative");
  if (options_.documents.empty()) {
    options_.documents.resize(size_t(source_->size()));
    std::iota(options_.documents.begin(), options_.documents.end(), 0);
  }
  std::vector<int64_t> lengths(size_t(source_->size()), 0);
  for (int64_t d : options_.documents) {
    LIBAI_CHECK(d >= 0 && d < source_->size(), "GptDataset: document ", d,
                " out of range: the source holds ", source_->size(), " sequences");
    lengths[size_t(d)] = source_->length(d);
    tokens_per_epoch_ += lengths[size_t(d)];
  }
  const int64_t T = tokens_per_epoch_;
  LIBAI_CHECK(T > S, "GptDataset: the documents hold ", T,
              " tokens, too few for one sample of seq_length + 1 = ", S + 1);

  // Epochs: the smallest E with E T >= num_samples S + 1.
  num_epochs_ = 1;
  while (num_epochs_ * T < options_.num_samples * S + 1) ++num_epochs_;
  int64_t samples_before_final = 0;
  if (num_epochs_ > 1) {
    samples_before_final = ((num_epochs_ - 1) * T - 1) / S;
    const int64_t from_final = options_.num_samples - samples_before_final;
    const int64_t per_epoch = (T - 1) / S;
    separate_final_epoch_ = from_final < int64_t(0.8 * double(per_epoch));
  }

  NumpyRandomState rng(options_.seed);
  if (separate_final_epoch_) {
    document_index_ = shuffled_documents(options_.documents, num_epochs_ - 1, rng);
    auto last = shuffled_documents(options_.documents, 1, rng);
    document_index_.insert(document_index_.end(), last.begin(), last.end());
  } else {
    document_index_ = shuffled_documents(options_.documents, num_epochs_, rng);
  }

  // Sample boundaries: (position in document_index_, offset in that document).
  const int64_t num_samples = (num_epochs_ * T - 1) / S;
  sample_index_.reserve(size_t(2 * (num_samples + 1)));
  int64_t position = 0, offset = 0;
  sample_index_.push_back(position);
  sample_index_.push_back(offset);
  const int64_t last_position = int64_t(document_index_.size()) - 1;
  for (int64_t k = 1; k <= num_samples; ++k) {
    int64_t remaining = S + 1;
    while (remaining != 0) {
      const int64_t length = lengths[size_t(document_index_[size_t(position)])] - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - 1;  // the last token starts the next sample too
        remaining = 0;
      } else if (position == last_position) {
        offset = lengths[size_t(document_index_[size_t(position)])] - 1;
        break;
      } else {
        ++position;
        offset = 0;
      }
    }
    sample_index_.push_back(position);
    sample_index_.push_back(offset);
  }

  if (separate_final_epoch_) {
    shuffle_index_ = shuffled_range(0, samples_before_final, rng);
    auto last = shuffled_range(samples_before_final, num_samples, rng);
    shuffle_index_.insert(shuffle_index_.end(), last.begin(), last.end());
  } else {
    shuffle_index_ = shuffled_range(0, num_samples, rng);
  }
}

std::vector<int64_t> GptDataset::tokens(int64_t index) const {
  LIBAI_CHECK(index >= 0 && index < size(), "GptDataset: sample ", index, " out of range [0, ",
              size(), ")");
  const int64_t k = shuffle_index_[size_t(index)];
  const int64_t begin = sample_index_[size_t(2 * k)],
                begin_offset = sample_index_[size_t(2 * k + 1)];
  const int64_t end = sample_index_[size_t(2 * k + 2)],
                end_offset = sample_index_[size_t(2 * k + 3)];
  std::vector<int64_t> out;
  out.reserve(size_t(options_.seq_length + 1));
  for (int64_t p = begin; p <= end; ++p) {
    const int64_t doc = document_index_[size_t(p)];
    const int64_t from = p == begin ? begin_offset : 0;
    const int64_t count = p == end ? end_offset + 1 - from : -1;
    auto part = source_->get(doc, from, count);
    out.insert(out.end(), part.begin(), part.end());
  }
  LIBAI_CHECK(int64_t(out.size()) == options_.seq_length + 1, "GptDataset: sample ", index,
              " holds ", out.size(), " tokens, expected ", options_.seq_length + 1);
  return out;
}

models::TensorMap GptDataset::get(int64_t index) const {
  const auto t = tokens(index);
  const int64_t S = options_.seq_length;
  std::vector<int64_t> inputs(t.begin(), t.begin() + S), targets(t.begin() + 1, t.end());
  return {{"input_ids", Tensor::from_vector(inputs)},
          {"shifted_labels", Tensor::from_vector(targets)}};
}

}  // namespace libai::train::data
