// T5's span corruption (the "span_corruption" objective of T5 and Hugging Face's
// run_t5_mlm_flax): the token stream cut into raw spans, about noise_density of each raw span's
// tokens dropped in spans of mean length mean_noise_span_length, each dropped span replaced by a
// sentinel in the inputs, and the targets the dropped spans behind their sentinels.
//
//   data::T5SpanCorruptionDataset dataset(source, {.inputs_length = 512, .sentinel_start = 32099});
//   auto s = dataset.get(i);  // input_ids, attention_mask [512]; labels [114]
//   // T5ForConditionalGeneration's batch: compute_loss builds decoder_input_ids from labels
//
// Note [T5 span corruption]:
//  - lengths (T5's compute_input_and_target_lengths): the raw length L is the largest for which
//    non-noise tokens + one sentinel per span + EOS fit inputs_length, with
//    noise = round(L density) and spans = round(noise / mean span length) (round half to even,
//    as TensorFlow and Python round); targets_length = noise + spans + 1. 512 -> L = 568, 114.
//  - sample i is the raw tokens [i L, (i + 1) L) of the source's sequences concatenated in
//    order (Hugging Face's group_texts), taken modulo the stream's whole raw spans.
//  - the noise mask (random_spans_noise_mask): noise tokens and non-noise tokens are each split
//    into `spans` non-empty segments uniformly at random (a shuffled row of segment starts), and
//    the spans alternate non-noise, noise, ..., starting with non-noise.
//  - inputs: the non-noise tokens with noise span k replaced by sentinel_start - k (<extra_id_k>),
//    then EOS; labels: sentinel_start - k followed by noise span k, for each k, then EOS.
//  - every draw comes from SampleRng(seed, "t5_span_corruption", i).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "train/data/dataset.h"

namespace libai::train::data {

struct T5DatasetOptions {
  int64_t inputs_length = 512;
  double noise_density = 0.15;
  double mean_noise_span_length = 3.0;
  int64_t sentinel_start = 32099;  // the id of <extra_id_0>; <extra_id_k> = sentinel_start - k
  int64_t eos_id = 1;
  int64_t pad_id = 0;
  int64_t num_samples = 0;  // 0: one sample per raw span of the stream
  uint64_t seed = 1234;
};

// T5's compute_input_and_target_lengths: {raw tokens per sample, targets length}.
std::pair<int64_t, int64_t> t5_span_corruption_lengths(int64_t inputs_length, double noise_density,
                                                       double mean_noise_span_length);

class T5SpanCorruptionDataset : public Dataset {
 public:
  T5SpanCorruptionDataset(std::shared_ptr<const TokenSource> source, T5DatasetOptions options);

  int64_t size() const override { return size_; }
  models::TensorMap get(int64_t index) const override;
  std::vector<int64_t> raw_tokens(int64_t index) const;  // the sample's uncorrupted tokens
  // The noise mask of sample `index` (1 = dropped), over its raw tokens.
  std::vector<uint8_t> noise_mask(int64_t index) const;
  int64_t raw_length() const { return raw_length_; }
  int64_t targets_length() const { return targets_length_; }

 private:
  std::shared_ptr<const TokenSource> source_;
  T5DatasetOptions options_;
  std::vector<int64_t> starts_;  // stream offset of each sequence, and the total last
  int64_t raw_length_ = 0, targets_length_ = 0, raw_spans_ = 0, size_ = 0;
};

}  // namespace libai::train::data
