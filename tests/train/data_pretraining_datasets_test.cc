// BERT pretraining and T5 span corruption samples: structure, proportions over many samples
// (against the rates the objectives define), reconstruction of the text, reproducibility per
// sample index, and that the batches feed the loss heads (train/loss.h).
#include <gtest/gtest.h>

#include "../models/parity_util.h"
#include "train/data/bert_dataset.h"
#include "train/data/t5_dataset.h"
#include "train/loss.h"

namespace libai::train::data {
namespace {

// Documents of sentences; tokens in [10, 10 + range).
std::pair<std::shared_ptr<InMemoryTokenSource>, std::vector<int64_t>> sentences(
    int64_t docs, int64_t range, int64_t max_sentence = 12) {
  std::vector<std::vector<int64_t>> s;
  std::vector<int64_t> index{0};
  for (int64_t d = 0; d < docs; ++d) {
    const int64_t count = 1 + (d * 5) % 7;
    for (int64_t k = 0; k < count; ++k) {
      std::vector<int64_t> sentence;
      const int64_t length = 2 + (d * 13 + k * 7) % (max_sentence - 1);
      for (int64_t t = 0; t < length; ++t) sentence.push_back(10 + (d * 97 + k * 31 + t) % range);
      s.push_back(sentence);
    }
    index.push_back(int64_t(s.size()));
  }
  return {std::make_shared<InMemoryTokenSource>(s), index};
}

const BertSpecialTokens kSpecial{.cls = 1, .sep = 2, .mask = 3, .pad = 0};

TEST(BertDataset, SegmentsRebuildTheChunkAndMaskingHasTheRates) {
  auto [source, docs] = sentences(200, 1000);
  BertDataset ds(
      source, docs,
      {.seq_length = 128, .vocab_size = 1010, .tokens = kSpecial, .num_samples = 4000, .seed = 9});
  int64_t tokens = 0, predicted = 0, masked = 0, kept = 0, replaced = 0, random_next = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    auto s = ds.get(i);
    auto ids = s.at("input_ids").to_vector<int64_t>();
    auto types = s.at("token_type_ids").to_vector<int64_t>();
    auto attention = s.at("attention_mask").to_vector<int64_t>();
    auto labels = s.at("labels").to_vector<int64_t>();
    const int64_t length = std::count(attention.begin(), attention.end(), 1);
    ASSERT_EQ(ids[0], kSpecial.cls);
    ASSERT_EQ(ids[size_t(length - 1)], kSpecial.sep);
    for (int64_t p = length; p < 128; ++p) ASSERT_EQ(ids[size_t(p)], kSpecial.pad);
    // The segments with the masked tokens restored: A [SEP] B.
    std::vector<int64_t> a, b;
    int64_t seps = 0;
    for (int64_t p = 1; p < length; ++p) {
      int64_t t = labels[size_t(p)] != -100 ? labels[size_t(p)] : ids[size_t(p)];
      if (labels[size_t(p)] != -100) {
        ++predicted;
        const int64_t shown = ids[size_t(p)];
        if (shown == kSpecial.mask)
          ++masked;
        else if (shown == t)
          ++kept;
        else
          ++replaced;
      }
      if (t == kSpecial.sep && labels[size_t(p)] == -100) {
        ++seps;
        continue;
      }
      ASSERT_EQ(types[size_t(p)], seps == 0 ? 0 : 1);
      (seps == 0 ? a : b).push_back(t);
    }
    ASSERT_EQ(seps, 2);
    tokens += length;
    EXPECT_EQ(std::count_if(labels.begin(), labels.end(), [](int64_t v) { return v != -100; }),
              std::max<int64_t>(1, int64_t(std::nearbyint(length * 0.15))))  // Python's round
        << i;
    // No truncation at this seq_length: (A, B), or (B, A) when random next, is the chunk's
    // sentences in order.
    const int64_t nsp = s.at("next_sentence_label").item<int64_t>();
    random_next += nsp;
    auto first = nsp ? b : a, second = nsp ? a : b;
    first.insert(first.end(), second.begin(), second.end());
    std::vector<int64_t> stream;
    for (int64_t k = 0; k < source->size(); ++k) {
      auto t = source->get(k, 0, -1);
      stream.insert(stream.end(), t.begin(), t.end());
    }
    ASSERT_NE(std::search(stream.begin(), stream.end(), first.begin(), first.end()), stream.end())
        << "sample " << i << " is not consecutive text";
  }
  EXPECT_NEAR(double(predicted) / tokens, 0.15, 0.01);
  EXPECT_NEAR(double(masked) / predicted, 0.8, 0.015);
  EXPECT_NEAR(double(kept) / predicted, 0.1, 0.01);
  EXPECT_NEAR(double(replaced) / predicted, 0.1, 0.01);
  EXPECT_NEAR(double(random_next) / ds.size(), 0.5, 0.025);
}

TEST(BertDataset, SamplesAreReproducibleAndTruncatedToFit) {
  auto [source, docs] = sentences(50, 500, 30);
  BertDatasetOptions options{
      .seq_length = 16, .vocab_size = 510, .tokens = kSpecial, .num_samples = 100, .seed = 4};
  BertDataset one(source, docs, options), two(source, docs, options);
  for (int64_t i : {99, 3, 42}) {
    auto x = one.get(i), y = two.get(i);
    for (const auto& [key, t] : x)
      EXPECT_EQ(t.to_vector<int64_t>(), y.at(key).to_vector<int64_t>());
    EXPECT_EQ(x.at("attention_mask").to_vector<int64_t>().back(), 1);  // full after truncation
  }
  options.seed = 5;
  BertDataset other(source, docs, options);
  EXPECT_NE(one.get(0).at("input_ids").to_vector<int64_t>(),
            other.get(0).at("input_ids").to_vector<int64_t>());
  EXPECT_THROW(BertDataset(source, {0, 3}, options), Error);
}

TEST(BertDataset, BatchesFeedThePretrainingLoss) {
  auto model = models::load_model(libai::testing::model_fixture("bert_pretraining"));
  const int64_t vocab = model->config().get_int("vocab_size", 0);
  auto [source, docs] = sentences(20, vocab - 10);
  BertDataset ds(source, docs, {.seq_length = 32, .vocab_size = vocab, .tokens = kSpecial});
  auto out = compute_loss(*model, make_batch(ds, {0, 1, 2}));
  EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
  EXPECT_GT(out.parts.at("nsp_loss").item<double>(), 0);
}

TEST(T5SpanCorruption, LengthsAreT5s) {
  // T5 / run_t5_mlm_flax: inputs 512 at density 0.15, span 3 -> raw 568 tokens, targets 114.
  EXPECT_EQ(t5_span_corruption_lengths(512, 0.15, 3.0), (std::pair<int64_t, int64_t>{568, 114}));
  // By hand: 141 raw -> 21 noise (21.15), 7 spans, 141 - 21 + 7 + 1 = 128 inputs; 142 -> 129.
  EXPECT_EQ(t5_span_corruption_lengths(128, 0.15, 3.0), (std::pair<int64_t, int64_t>{141, 29}));
}

TEST(T5SpanCorruption, InputsAndLabelsRebuildTheText) {
  std::vector<std::vector<int64_t>> docs;
  for (int64_t d = 0; d < 60; ++d) {
    std::vector<int64_t> doc;
    for (int64_t t = 0; t < 5 + (d * 37) % 90; ++t) doc.push_back(10 + (d * 11 + t * 3) % 700);
    docs.push_back(doc);
  }
  auto source = std::make_shared<InMemoryTokenSource>(docs);
  T5DatasetOptions options{.inputs_length = 64, .sentinel_start = 999, .num_samples = 3000};
  T5SpanCorruptionDataset ds(source, options);
  const int64_t L = ds.raw_length();
  int64_t noise = 0, spans = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    auto s = ds.get(i);
    auto inputs = s.at("input_ids").to_vector<int64_t>();
    auto labels = s.at("labels").to_vector<int64_t>();
    ASSERT_EQ(int64_t(labels.size()), ds.targets_length());
    // Replace each sentinel in the inputs by the label tokens after the same sentinel.
    std::vector<int64_t> rebuilt;
    int64_t k = 0;
    for (int64_t t : inputs) {
      if (t == options.eos_id) break;
      if (t > options.sentinel_start - 100) {
        ASSERT_EQ(t, options.sentinel_start - k);
        auto at = std::find(labels.begin(), labels.end(), t);
        ASSERT_NE(at, labels.end());
        for (++at;
             at != labels.end() && *at <= options.sentinel_start - 100 && *at != options.eos_id;
             ++at)
          rebuilt.push_back(*at), ++noise;
        ++k;
      } else {
        rebuilt.push_back(t);
      }
    }
    spans += k;
    ASSERT_EQ(rebuilt, ds.raw_tokens(i)) << "sample " << i;
    auto end = std::find(labels.begin(), labels.end(), -100);
    EXPECT_EQ(*(end - 1), options.eos_id);
  }
  const int64_t expected_noise = int64_t(std::nearbyint(L * 0.15));  // Python's round
  EXPECT_EQ(noise, expected_noise * ds.size());
  EXPECT_NEAR(double(noise) / spans, 3.0, 0.5);
  // Different samples drop different spans, the same sample the same ones.
  EXPECT_NE(ds.noise_mask(0), ds.noise_mask(1));
  EXPECT_EQ(ds.noise_mask(7), T5SpanCorruptionDataset(source, options).noise_mask(7));
}

TEST(T5SpanCorruption, BatchesFeedTheSeq2SeqLoss) {
  auto model = models::load_model(libai::testing::model_fixture("t5"));
  const int64_t vocab = model->config().get_int("vocab_size", 0);
  std::vector<std::vector<int64_t>> docs(1);
  for (int64_t t = 0; t < 400; ++t) docs[0].push_back(2 + t % (vocab - 120));
  T5SpanCorruptionDataset ds(std::make_shared<InMemoryTokenSource>(docs),
                             {.inputs_length = 32, .sentinel_start = vocab - 1});
  auto out = compute_loss(*model, make_batch(ds, {0, 1}));
  EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
  EXPECT_EQ(out.targets, 2 * ds.targets_length());
}

}  // namespace
}  // namespace libai::train::data
