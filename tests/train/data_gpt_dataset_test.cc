// GptDataset against numpy (tools/make_gpt_index_fixture.py builds Megatron's index arrays for
// the same corpora and seeds), the sample form the causal-LM loss takes ("shifted_labels"), and
// NumpyRandomState against numpy's shuffle.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../models/parity_util.h"
#include "train/data/gpt_dataset.h"
#include "train/data/numpy_random.h"
#include "train/loss.h"

namespace libai::train::data {
namespace {

nlohmann::json fixture() {
  std::ifstream in(std::filesystem::path(LIBAI_SOURCE_DIR) / "tests" / "data" / "datasets" /
                   "gpt_index.json");
  return nlohmann::json::parse(in);
}

// The twin of corpus() in tools/make_gpt_index_fixture.py.
std::vector<std::vector<int64_t>> corpus(int64_t num_docs, int64_t max_len, int64_t salt) {
  std::vector<std::vector<int64_t>> docs;
  for (int64_t d = 0; d < num_docs; ++d) {
    const int64_t length = 1 + (d * 7919 + salt * 31) % max_len;
    std::vector<int64_t> doc;
    for (int64_t t = 0; t < length; ++t) doc.push_back((d * 1000 + t * 17 + salt) % 50257);
    docs.push_back(doc);
  }
  return docs;
}

TEST(NumpyRandomState, ShuffleEqualsNumpys) {
  const auto f = fixture();
  NumpyRandomState rng(5);
  auto p = rng.permutation(70000);  // > 2^16: several mask widths
  const auto first = f.at("permutation_70000_seed5_first").get<std::vector<int64_t>>();
  EXPECT_EQ(std::vector<int64_t>(p.begin(), p.begin() + 64), first);
  int64_t sum = 0;
  for (int64_t i = 0; i < 70000; ++i) sum += i * p[size_t(i)];
  EXPECT_EQ(sum, f.at("permutation_70000_seed5_sum_of_i_times_x").get<int64_t>());
}

TEST(NumpyRandomState, IntervalStaysInRangeAndCoversIt) {
  NumpyRandomState rng(1);
  std::vector<int> seen(6, 0);
  for (int i = 0; i < 6000; ++i) {
    const uint64_t v = rng.interval(5);
    ASSERT_LE(v, 5u);
    ++seen[v];
  }
  for (int c : seen) EXPECT_NEAR(c, 1000, 150);
  EXPECT_LE(rng.interval(uint64_t(1) << 40), uint64_t(1) << 40);  // the 64-bit path
}

TEST(GptDataset, IndexArraysAndSamplesEqualNumpys) {
  const auto f = fixture();
  for (const auto& c : f.at("cases")) {
    SCOPED_TRACE(c.at("seed").dump());
    auto source = std::make_shared<InMemoryTokenSource>(
        corpus(c.at("num_docs"), c.at("max_len"), c.at("salt")));
    GptDataset ds(source, {.seq_length = c.at("seq_length"),
                           .num_samples = c.at("num_samples"),
                           .seed = c.at("seed").get<uint32_t>()});
    EXPECT_EQ(ds.num_epochs(), c.at("epochs").get<int64_t>());
    EXPECT_EQ(ds.separate_final_epoch(), c.at("separate_final_epoch").get<bool>());
    EXPECT_EQ(ds.tokens_per_epoch(), c.at("tokens_per_epoch").get<int64_t>());
    EXPECT_EQ(ds.size(), c.at("size").get<int64_t>());
    EXPECT_EQ(ds.document_index(), c.at("document_index").get<std::vector<int32_t>>());
    EXPECT_EQ(ds.sample_index(), c.at("sample_index").get<std::vector<int64_t>>());
    EXPECT_EQ(ds.shuffle_index(), c.at("shuffle_index").get<std::vector<int64_t>>());
    const auto samples = c.at("first_samples").get<std::vector<std::vector<int64_t>>>();
    for (size_t i = 0; i < samples.size(); ++i) {
      EXPECT_EQ(ds.tokens(int64_t(i)), samples[i]);
      auto s = ds.get(int64_t(i));
      const int64_t S = c.at("seq_length");
      EXPECT_EQ(s.at("input_ids").to_vector<int64_t>(),
                std::vector<int64_t>(samples[i].begin(), samples[i].begin() + S));
      EXPECT_EQ(s.at("shifted_labels").to_vector<int64_t>(),
                std::vector<int64_t>(samples[i].begin() + 1, samples[i].end()));
    }
  }
}

// Every token position of every epoch is covered: consecutive samples overlap by exactly one
// token, so the samples (in index order) rebuild the shuffled document stream.
TEST(GptDataset, SamplesTileTheDocumentStream) {
  auto docs = corpus(30, 25, 9);
  auto source = std::make_shared<InMemoryTokenSource>(docs);
  GptDataset ds(source, {.seq_length = 7, .num_samples = 100, .seed = 3});
  std::vector<int64_t> stream;
  for (int32_t d : ds.document_index())
    stream.insert(stream.end(), docs[size_t(d)].begin(), docs[size_t(d)].end());
  std::vector<int64_t> rebuilt;
  std::vector<int64_t> position_of(size_t(ds.size()));
  for (int64_t i = 0; i < ds.size(); ++i) position_of[size_t(ds.shuffle_index()[size_t(i)])] = i;
  for (int64_t k = 0; k < ds.size(); ++k) {
    auto t = ds.tokens(position_of[size_t(k)]);
    rebuilt.insert(rebuilt.end(), t.begin() + (k == 0 ? 0 : 1), t.end());
  }
  ASSERT_LE(rebuilt.size(), stream.size());
  EXPECT_EQ(rebuilt,
            std::vector<int64_t>(stream.begin(), stream.begin() + int64_t(rebuilt.size())));
  EXPECT_GE(ds.size(), 100);
}

TEST(GptDataset, BadOptionsNameTheProblem) {
  auto source = std::make_shared<InMemoryTokenSource>(corpus(2, 3, 0));
  EXPECT_THROW(GptDataset(source, {.seq_length = 64}), Error);
  EXPECT_THROW(GptDataset(source, {.seq_length = 1, .documents = {5}}), Error);
}

// The causal-LM loss with shifted_labels on S tokens equals the loss of the same S + 1 tokens
// with the default labels: causal attention makes positions 0..S-1's logits the same, and the
// two paths must pick the same S targets.
TEST(GptDataset, ShiftedLabelsGiveMegatronsTargets) {
  auto model = models::load_model(libai::testing::model_fixture("gpt2"));
  auto docs = corpus(12, 20, 5);
  for (auto& d : docs)
    for (auto& t : d) t %= model->config().get_int("vocab_size", 0);
  GptDataset ds(std::make_shared<InMemoryTokenSource>(docs), {.seq_length = 6, .seed = 11});
  const auto batch = collate({ds.get(0), ds.get(1)});
  const double shifted = compute_loss(*model, batch).loss.item<double>();
  std::vector<int64_t> full;
  for (int64_t i : {0, 1}) {
    auto t = ds.tokens(i);
    full.insert(full.end(), t.begin(), t.end());
  }
  const double reference =
      compute_loss(*model, {{"input_ids", Tensor::from_vector(full, {2, 7})}}).loss.item<double>();
  EXPECT_NEAR(shifted, reference, 1e-5 * std::abs(reference));
  EXPECT_EQ(compute_loss(*model, batch).targets, 12);
  auto both = batch;
  both["labels"] = batch.at("input_ids");
  EXPECT_THROW(compute_loss(*model, both), Error);
}

}  // namespace
}  // namespace libai::train::data
