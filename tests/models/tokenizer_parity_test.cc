// The tokenizer of every fixture model folder against transformers' AutoTokenizer on the same
// folder (tokenizer_reference.json, made by tools/make_fixtures.py): multilingual texts with
// CJK, emoji, accents, runs of whitespace and special tokens, and a padded, truncated batch.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "models/tokenizers/tokenizer.h"
#include "parity_util.h"

namespace libai::models {
namespace {

class FolderTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(FolderTokenizer, MatchesAutoTokenizer) {
  const auto folder = testing::model_fixture(GetParam());
  std::ifstream in(folder / "tokenizer_reference.json");
  const auto ref = nlohmann::json::parse(in);
  auto tok = tokenizers::load_tokenizer(folder);
  for (const auto& c : ref.at("cases")) {
    const std::string text = c.at("text");
    auto e = tok->encode(text);
    EXPECT_EQ(e.ids, c.at("input_ids").get<std::vector<int32_t>>()) << GetParam() << ": " << text;
  }
  const auto& batch = ref.at("batch");
  tokenizers::EncodeOptions options;
  options.padding = tokenizers::Padding::longest;
  options.truncation = true;
  options.max_length = batch.at("kwargs").at("max_length").get<size_t>();
  auto encodings = tok->encode_batch(batch.at("texts").get<std::vector<std::string>>(), options);
  const auto ids = batch.at("input_ids").get<std::vector<std::vector<int32_t>>>();
  const auto mask = batch.at("attention_mask").get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(encodings.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(encodings[i].ids, ids[i]) << GetParam() << " batch row " << i;
    EXPECT_EQ(encodings[i].attention_mask, mask[i]) << GetParam() << " batch row " << i;
  }
}

// Not t5 / mt5: transformers 5's T5Tokenizer rebuilds its own normalizer (collapsing runs of
// whitespace) instead of the fixture tokenizer.json's, so AutoTokenizer is not a reference for
// that file; the same Unigram tokenizer.json is checked against the `tokenizers` library in
// tokenizer_test.cc.
INSTANTIATE_TEST_SUITE_P(Models, FolderTokenizer, ::testing::Values("gpt2", "bert", "roberta"));

}  // namespace
}  // namespace libai::models
