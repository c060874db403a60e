#include "train/data/t5_dataset.h"

#include <algorithm>
#include <cmath>

#include "train/data/sample_rng.h"

namespace libai::train::data {
namespace {

int64_t round_half_even(double x) { return int64_t(std::nearbyint(x)); }

// {inputs length, targets length} of `raw` tokens.
std::pair<int64_t, int64_t> corrupted_lengths(int64_t raw, double density, double mean_span) {
  const int64_t noise = round_half_even(double(raw) * density);
  const int64_t spans = round_half_even(double(noise) / mean_span);
  return {raw - noise + spans + 1, noise + spans + 1};
}

// `items` split into `segments` non-empty parts at random (T5's _random_segmentation).
std::vector<int64_t> random_segmentation(int64_t items, int64_t segments, SampleRng& rng) {
  std::vector<uint8_t> starts(size_t(items - 1), 0);
  std::fill(starts.begin(), starts.begin() + (segments - 1), 1);
  rng.shuffle(starts);
  std::vector<int64_t> lengths(size_t(segments), 0);
  int64_t segment = 0;
  ++lengths[0];
  for (uint8_t s : starts) {
    segment += s;
    ++lengths[size_t(segment)];
  }
  return lengths;
}

}  // namespace

std::pair<int64_t, int64_t> t5_span_corruption_lengths(int64_t inputs_length, double noise_density,
                                                       double mean_noise_span_length) {
  int64_t raw = inputs_length;
  while (corrupted_lengths(raw + 1, noise_density, mean_noise_span_length).first <= inputs_length)
    ++raw;
  int64_t targets = corrupted_lengths(raw, noise_density, mean_noise_span_length).second;
  if (noise_density == 0.5 && targets > inputs_length) --raw, --targets;
  return {raw, targets};
}

T5SpanCorruptionDataset::T5SpanCorruptionDataset(std::shared_ptr<const TokenSource> source,
                                                 T5DatasetOptions options)
    : source_(std::move(source)), options_(options) {
  LIBAI_CHECK(source_ != nullptr, "T5SpanCorruptionDataset: no token source");
  LIBAI_CHECK(options_.noise_density > 0 && options_.noise_density < 1,
              "T5SpanCorruptionDataset: noise_density ", options_.noise_density,
              " should be in (0, 1)");
  LIBAI_CHECK(options_.mean_noise_span_length >= 1,
              "T5SpanCorruptionDataset: "
              "mean_noise_span_length ",
              options_.mean_noise_span_length, " should be >= 1");
  LIBAI_CHECK(options_.inputs_length >= 4, "T5SpanCorruptionDataset: inputs_length ",
              options_.inputs_length, " is too short");
  std::tie(raw_length_, targets_length_) = t5_span_corruption_lengths(
      options_.inputs_length, options_.noise_density, options_.mean_noise_span_length);
  starts_.push_back(0);
  for (int64_t s = 0; s < source_->size(); ++s)
    starts_.push_back(starts_.back() + source_->length(s));
  raw_spans_ = starts_.back() / raw_length_;
  LIBAI_CHECK(raw_spans_ > 0, "T5SpanCorruptionDataset: the source holds ", starts_.back(),
              " tokens, fewer than one sample's ", raw_length_);
  size_ = options_.num_samples > 0 ? options_.num_samples : raw_spans_;
}

std::vector<int64_t> T5SpanCorruptionDataset::raw_tokens(int64_t index) const {
  LIBAI_CHECK(index >= 0 && index < size_, "T5SpanCorruptionDataset: sample ", index,
              " out of range [0, ", size_, ")");
  int64_t at = (index % raw_spans_) * raw_length_;
  const int64_t end = at + raw_length_;
  std::vector<int64_t> out;
  out.reserve(size_t(raw_length_));
  auto seq = std::upper_bound(starts_.begin(), starts_.end(), at) - starts_.begin() - 1;
  while (at < end) {
    const int64_t offset = at - starts_[size_t(seq)];
    const int64_t count = std::min(end, starts_[size_t(seq) + 1]) - at;
    if (count > 0) {
      auto part = source_->get(seq, offset, count);
      out.insert(out.end(), part.begin(), part.end());
      at += count;
    }
    ++seq;
  }
  return out;
}

std::vector<uint8_t> T5SpanCorruptionDataset::noise_mask(int64_t index) const {
  SampleRng rng(options_.seed, "t5_span_corruption", index);
  const int64_t length = raw_length_;
  const int64_t noise =
      std::clamp<int64_t>(round_half_even(double(length) * options_.noise_density), 1, length - 1);
  const int64_t spans =
      std::max<int64_t>(1, round_half_even(double(noise) / options_.mean_noise_span_length));
  const auto noise_lengths = random_segmentation(noise, spans, rng);
  const auto kept_lengths = random_segmentation(length - noise, spans, rng);
  std::vector<uint8_t> mask;
  mask.reserve(size_t(length));
  for (int64_t k = 0; k < spans; ++k) {
    mask.insert(mask.end(), size_t(kept_lengths[size_t(k)]), 0);
    mask.insert(mask.end(), size_t(noise_lengths[size_t(k)]), 1);
  }
  return mask;
}

models::TensorMap T5SpanCorruptionDataset::get(int64_t index) const {
  const auto raw = raw_tokens(index);
  const auto mask = noise_mask(index);
  std::vector<int64_t> inputs, labels;
  int64_t span = -1;
  for (size_t j = 0; j < raw.size(); ++j) {
    if (mask[j] && (j == 0 || !mask[j - 1])) {
      ++span;
      inputs.push_back(options_.sentinel_start - span);
      labels.push_back(options_.sentinel_start - span);
    }
    (mask[j] ? labels : inputs).push_back(raw[j]);
  }
  inputs.push_back(options_.eos_id);
  labels.push_back(options_.eos_id);
  LIBAI_CHECK(
      int64_t(inputs.size()) <= options_.inputs_length && int64_t(labels.size()) <= targets_length_,
      "T5SpanCorruptionDataset: sample ", index, " has ", inputs.size(), " inputs and ",
      labels.size(), " targets, over ", options_.inputs_length, " and ", targets_length_);
  std::vector<int64_t> attention(size_t(options_.inputs_length), 0);
  std::fill(attention.begin(), attention.begin() + int64_t(inputs.size()), 1);
  inputs.resize(size_t(options_.inputs_length), options_.pad_id);
  labels.resize(size_t(targets_length_), -100);
  return {{"input_ids", Tensor::from_vector(inputs)},
          {"attention_mask", Tensor::from_vector(attention)},
          {"labels", Tensor::from_vector(labels)}};
}

}  // namespace libai::train::data
