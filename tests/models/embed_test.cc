// pipelines::embed batches texts longest first (as sentence-transformers does) and returns the
// vectors in input order: the same vectors as batching in input order, and as embedding each
// text alone (no padding at all), on the BERT fixture with texts of mixed lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/pipelines/pipelines.h"

namespace libai::models {
namespace {

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  return worst;
}

TEST(Embed, LengthSortedBatchesKeepTheInputOrderAndTheVectors) {
  auto m = pipelines::TextModel::load(LIBAI_SOURCE_DIR "/tests/data/models/bert");
  // Lengths chosen so that sorting regroups them: short and long texts alternate.
  const std::vector<std::string> texts = {
      "Hi.",
      "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods.",
      "A cat sits.",
      "Hello, world!",
      "Sentence embeddings average the last hidden state over the real tokens of each text.",
      "ok",
      "Padding tokens are masked out of attention, so they change nothing in the average.",
  };
  pipelines::EmbedOptions sorted;
  sorted.batch_size = 3;
  std::vector<size_t> batches;
  sorted.on_batch = [&](size_t n) { batches.push_back(n); };
  const auto by_length = pipelines::embed(m, texts, sorted);
  EXPECT_EQ(batches, (std::vector<size_t>{3, 3, 1}));

  pipelines::EmbedOptions unsorted;
  unsorted.batch_size = 3;
  unsorted.sort_by_length = false;
  const auto in_order = pipelines::embed(m, texts, unsorted);

  ASSERT_EQ(by_length.size(), texts.size());
  ASSERT_EQ(in_order.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto alone = pipelines::embed(m, {texts[i]}, size_t(1));
    EXPECT_LT(max_difference(by_length[i], in_order[i]), 1e-6) << "text " << i;
    EXPECT_LT(max_difference(by_length[i], alone[0]), 1e-6) << "text " << i;
  }
  // Different texts give different vectors, so a permuted output could not pass the above.
  EXPECT_GT(max_difference(by_length[0], by_length[1]), 1e-3);
}

}  // namespace
}  // namespace libai::models
