// Tokenizers against the Hugging Face `tokenizers` library: tests/data/tokenizers/<name>/
// expected.json holds its ids, tokens and decodes for each text (tools/make_tokenizer_fixtures.py).
#include "models/tokenizers/tokenizer.h"

#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "models/tokenizers/pipeline.h"
#include "models/tokenizers/regex.h"
#include "models/tokenizers/unicode.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fixture(const std::string& name) {
  return fs::path(LIBAI_SOURCE_DIR) / "tests" / "data" / "tokenizers" / name;
}

json expected_for(const std::string& name) {
  std::ifstream in(fixture(name) / "expected.json");
  return json::parse(in);
}

void check_cases(const Tokenizer& tok, const json& expected, const std::string& name) {
  size_t checked = 0;
  for (const json& c : expected["cases"]) {
    const std::string text = c["text"];
    const bool add = c["add_special_tokens"];
    SCOPED_TRACE(name + ": text '" + text + "' add_special_tokens=" + (add ? "1" : "0"));
    const Encoding e = tok.encode(text, add);
    EXPECT_EQ(e.ids, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(e.tokens, c["tokens"].get<std::vector<std::string>>());
    EXPECT_EQ(e.attention_mask, std::vector<int32_t>(e.ids.size(), 1));
    EXPECT_EQ(tok.decode(c["ids"], false), c["decode"].get<std::string>());
    EXPECT_EQ(tok.decode(c["ids"], true), c["decode_skip"].get<std::string>());
    ++checked;
  }
  EXPECT_GT(checked, 40u);
}

void check_batches(const Tokenizer& tok, const json& expected, const std::string& name) {
  for (const json& b : expected["batches"]) {
    SCOPED_TRACE(name + ": batch " + b["name"].get<std::string>());
    EncodeOptions options;
    const std::string padding = b["padding"];
    options.padding = padding == "longest"      ? Padding::longest
                      : padding == "max_length" ? Padding::max_length
                                                : Padding::none;
    options.max_length = b.value("max_length", 0);
    options.truncation = b["truncation"];
    options.pad_id = b["pad_id"].get<int32_t>();
    options.padding_side = b["padding_side"] == "left" ? Side::left : Side::right;
    const auto out = tok.encode_batch(b["texts"].get<std::vector<std::string>>(), options);
    ASSERT_EQ(out.size(), b["ids"].size());
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].ids, b["ids"][i].get<std::vector<int32_t>>()) << "row " << i;
      EXPECT_EQ(out[i].attention_mask, b["attention_mask"][i].get<std::vector<int32_t>>());
      EXPECT_EQ(out[i].tokens.size(), out[i].ids.size());
    }
  }
}

// NFKD / NFKC against Python's unicodedata.normalize (values below printed by it): ligature,
// superscript, circled digit, squared unit, half-width kana with its voiced mark, a long s with
// two marks to reorder, Hangul jamo, the angstrom sign and a titlecase digraph.
TEST(Unicode, CompatibilityForms) {
  const std::u32string text = U"\ufb01\u00b2\u2460\u3392\uff76\uff9e\u1e9b\u0323";
  EXPECT_EQ(nfkd(text), U"fi21MHz\u30ab\u3099s\u0323\u0307");
  EXPECT_EQ(nfkc(text), U"fi21MHz\u30ac\u1e69");
  EXPECT_EQ(nfkc(U"\u1100\u1161\u11a8"), U"\uac01");
  EXPECT_EQ(nfkd(U"\u00c5\u212b\u01c5"), U"A\u030aA\u030aDz\u030c");
  EXPECT_EQ(nfkc(U"\u00c5\u212b\u01c5"), U"\u00c5\u00c5D\u017e");
  EXPECT_EQ(nfd(U"\ufb01"), U"\ufb01");  // canonical forms keep compatibility characters
}

// Extended grapheme clusters (UAX #29): CR LF, marks, Hangul jamo, flags in pairs, an emoji ZWJ
// sequence with a skin tone, and a break before a control character.
TEST(Unicode, GraphemeClusters) {
  const std::u32string text =
      U"e\u0301\u0301\r\n\u1100\u1161\u11a8\U0001F1EF\U0001F1F5\U0001F1FA"
      U"\U0001F468\U0001F3FD\u200d\U0001F469x\u0007";
  std::vector<size_t> ends;
  for (size_t at = 0; at < text.size(); at = grapheme_end(text, at))
    ends.push_back(grapheme_end(text, at));
  EXPECT_EQ(ends, (std::vector<size_t>{3, 5, 8, 10, 11, 15, 16, 17}));
}

class TokenizerParity : public testing::TestWithParam<std::string> {};

TEST_P(TokenizerParity, MatchesHuggingFace) {
  const std::string name = GetParam();
  if (!fs::exists(fixture(name))) GTEST_SKIP() << "fixture " << name << " not generated";
  const auto tok = load_tokenizer(fixture(name));
  const json expected = expected_for(name);
  check_cases(*tok, expected, name);
  check_batches(*tok, expected, name);
}

INSTANTIATE_TEST_SUITE_P(TokenizerFixtures, TokenizerParity,
                         testing::Values("bpe", "bpe_legacy", "wordpiece", "wordpiece_cased",
                                         "wordpiece_legacy", "unigram", "unigram_nfkc",
                                         "unigram_nfkd", "unigram_precompiled", "minilm", "llama2",
                                         "llama2_metaspace", "llama3", "qwen2"));

// Split alone against HF's pre_tokenize_str: every behavior, inverted or not, regex and string
// patterns (empty ones too), anchors, \s / \w / \h in Oniguruma's meaning, the Llama 3 and Qwen2
// patterns (Note [Split behaviors], Note [Oniguruma through PCRE2]).
TEST(TokenizerSplit, MatchesHuggingFacePieces) {
  const json expected = expected_for("split");
  const auto texts = expected["texts"].get<std::vector<std::string>>();
  size_t checked = 0;
  for (const json& group : expected["groups"]) {
    const auto pre = make_pre_tokenizer(group["pre_tokenizer"], {"split/expected.json", "groups"});
    ASSERT_NE(pre, nullptr);
    for (size_t i = 0; i < texts.size(); ++i) {
      SCOPED_TRACE(group["pre_tokenizer"].dump() + " on '" + texts[i] + "'");
      std::vector<std::string> pieces;
      pre->split(texts[i], true, pieces);
      EXPECT_EQ(pieces, group["pieces"][i].get<std::vector<std::string>>());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 15u * 10u * texts.size());
}

TEST(TokenizerSplit, OnigurumaEscapesRewritten) {
  EXPECT_EQ(oniguruma_to_pcre2(R"(a\\s)"), R"(a\\s)");  // an escaped backslash, then 's'
  EXPECT_EQ(oniguruma_to_pcre2(R"(\Q\s\E)"), R"(\Q\s\E)");
  EXPECT_EQ(oniguruma_to_pcre2(R"((?m:.)(?i-m))"), R"((?s:.)(?i-s))");
  EXPECT_EQ(oniguruma_to_pcre2(R"([]\h])"), R"([]0-9a-fA-F])");
  EXPECT_EQ(regex_escape("a.b c*"), R"(a\.b\ c\*)");
  // U+180E is not White_Space (Oniguruma) though PCRE2's own \s takes it.
  const Regex space(R"(\s)", "test");
  EXPECT_TRUE(space.find_all("\u180e").empty());
  EXPECT_EQ(space.find_all("\u0085").size(), 1u);
}

// The special tokens Llama and Qwen2 generation looks up: bos/eos named in
// tokenizer_config.json resolve to the added tokens' ids.
TEST(TokenizerApi, LlamaAndQwenSpecialTokenIds) {
  const auto llama2 = load_tokenizer(fixture("llama2"));
  EXPECT_EQ(llama2->special_tokens().bos, "<s>");
  EXPECT_EQ(llama2->special_id(llama2->special_tokens().bos), 1);
  EXPECT_EQ(llama2->special_id(llama2->special_tokens().eos), 2);
  EXPECT_EQ(llama2->token_to_id("<0x41>"), 3 + 0x41);
  const auto llama3 = load_tokenizer(fixture("llama3"));
  const auto bos = llama3->special_id(llama3->special_tokens().bos);
  ASSERT_TRUE(bos.has_value());
  EXPECT_EQ(llama3->encode("hi").ids.front(), *bos);
  EXPECT_EQ(llama3->special_id(llama3->special_tokens().eos), llama3->token_to_id("<|eot_id|>"));
  const auto qwen2 = load_tokenizer(fixture("qwen2"));
  EXPECT_EQ(qwen2->special_tokens().bos, "");
  EXPECT_EQ(qwen2->special_id(qwen2->special_tokens().eos), qwen2->token_to_id("<|im_end|>"));
  EXPECT_EQ(qwen2->special_id(qwen2->special_tokens().pad), qwen2->token_to_id("<|endoftext|>"));
}

TEST(TokenizerLegacy, MiniLmVocabTxtMatchesItsTokenizerJson) {
  if (!fs::exists(fixture("minilm"))) GTEST_SKIP() << "minilm fixture not present";
  const auto tok = load_tokenizer(fixture("minilm") / "vocab.txt");
  check_cases(*tok, expected_for("minilm"), "minilm via vocab.txt");
}

TEST(TokenizerApi, VocabularyAndSpecialTokens) {
  const auto tok = load_tokenizer(fixture("minilm") / "tokenizer.json");
  EXPECT_EQ(tok->vocab_size(), 30522u);
  EXPECT_EQ(tok->token_to_id("[CLS]"), 101);
  EXPECT_EQ(tok->id_to_token(102), "[SEP]");
  EXPECT_EQ(tok->token_to_id("not-a-token-at-all"), std::nullopt);
  EXPECT_EQ(tok->special_tokens().pad, "[PAD]");
  EXPECT_EQ(tok->special_tokens().mask, "[MASK]");
  const Encoding e = tok->encode("Hello, world!");
  EXPECT_EQ(e.ids, (std::vector<int32_t>{101, 7592, 1010, 2088, 999, 102}));
  EXPECT_EQ(tok->decode(e.ids, true), "hello, world!");
}

TEST(TokenizerApi, PaddingAndTruncationOptions) {
  const auto tok = load_tokenizer(fixture("minilm"));
  EncodeOptions options{.padding = Padding::max_length,
                        .max_length = 4,
                        .truncation = true,
                        .padding_side = Side::left,
                        .pad_id = 7};
  const auto out = tok->encode_batch({"hello", "hello world again"}, options);
  EXPECT_EQ(out[0].ids, (std::vector<int32_t>{7, 101, 7592, 102}));
  EXPECT_EQ(out[0].attention_mask, (std::vector<int32_t>{0, 1, 1, 1}));
  EXPECT_EQ(out[0].tokens[0], "[PAD]");
  EXPECT_EQ(out[1].ids, (std::vector<int32_t>{101, 7592, 2088, 102}));
  options.max_length = 1;
  EXPECT_THROW(tok->encode_batch({"x"}, options), InvalidArgument);
}

// Writes `text` as a tokenizer.json in a fresh folder and returns the folder.
fs::path write_tokenizer_json(const std::string& name, const std::string& text) {
  const fs::path folder = fs::path(testing::TempDir()) / ("libai_tok_" + name);
  fs::create_directories(folder);
  std::ofstream(folder / "tokenizer.json") << text;
  return folder;
}

template <typename ErrorType>
std::string error_of(const fs::path& path) {
  try {
    load_tokenizer(path);
  } catch (const ErrorType& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error kind: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error for " << path;
  return "";
}

TEST(TokenizerErrors, UnknownModelTypeNamesFileAndField) {
  const auto folder =
      write_tokenizer_json("unknown", R"({"model": {"type": "Magic", "vocab": {}}})");
  const std::string message = error_of<Unsupported>(folder);
  EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
  EXPECT_NE(message.find("model.type"), std::string::npos) << message;
  EXPECT_NE(message.find("Magic"), std::string::npos) << message;
}

TEST(TokenizerErrors, TruncatedJsonIsCorruptInput) {
  std::ifstream in(fixture("wordpiece") / "tokenizer.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto folder = write_tokenizer_json("truncated", text.substr(0, text.size() / 2));
  const std::string message = error_of<CorruptInput>(folder);
  EXPECT_NE(message.find("malformed JSON"), std::string::npos) << message;
}

// Found by tests/fuzz/fuzz_tokenizer.cc: nlohmann reports a number too large for a double as
// out_of_range, not parse_error, and it escaped as a non-libai exception.
TEST(TokenizerErrors, NumberOverflowIsCorruptInput) {
  const auto folder = write_tokenizer_json(
      "overflow", R"({"model": {"type": "WordPiece", "vocab": {"a": -4E050317189431677}}})");
  const std::string message = error_of<CorruptInput>(folder);
  EXPECT_NE(message.find("malformed JSON"), std::string::npos) << message;
}

TEST(TokenizerErrors, MissingVocabNamesTheField) {
  const auto folder =
      write_tokenizer_json("novocab", R"({"model": {"type": "WordPiece", "unk_token": "[UNK]"}})");
  const std::string message = error_of<CorruptInput>(folder);
  EXPECT_NE(message.find("model.vocab"), std::string::npos) << message;
}

TEST(TokenizerErrors, UnknownComponentAndMissingFiles) {
  const auto folder =
      write_tokenizer_json("badnorm", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                     "normalizer": {"type": "Magic"}})");
  EXPECT_NE(error_of<Unsupported>(folder).find("normalizer.type"), std::string::npos);
  const auto empty = fs::path(testing::TempDir()) / "libai_tok_empty";
  fs::create_directories(empty);
  EXPECT_NE(error_of<NotFound>(empty).find("tokenizer.json"), std::string::npos);
  const auto bad_merge = write_tokenizer_json(
      "badmerge", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})");
  EXPECT_NE(error_of<CorruptInput>(bad_merge).find("model.merges[0]"), std::string::npos);
}

// A Split with an unknown behavior, an invalid regex or a pattern of neither kind: one error
// naming the file and the key.
TEST(TokenizerErrors, BrokenSplitNamesTheField) {
  const auto with_split = [](const std::string& name, const std::string& split) {
    return write_tokenizer_json(
        name, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": )"
              R"({"type": "Sequence", "pretokenizers": [)" +
                  split + "]}}");
  };
  const std::string behavior = error_of<CorruptInput>(with_split(
      "split_behavior", R"({"type": "Split", "pattern": {"String": " "}, "behavior": "Merged"})"));
  EXPECT_NE(behavior.find("tokenizer.json"), std::string::npos) << behavior;
  EXPECT_NE(behavior.find("pre_tokenizer.pretokenizers[0].behavior"), std::string::npos)
      << behavior;
  EXPECT_NE(behavior.find("Merged"), std::string::npos) << behavior;
  const std::string regex = error_of<CorruptInput>(with_split(
      "split_regex", R"({"type": "Split", "pattern": {"Regex": "(a|b"}, "behavior": "Isolated"})"));
  EXPECT_NE(regex.find("tokenizer.json"), std::string::npos) << regex;
  EXPECT_NE(regex.find("pre_tokenizer.pretokenizers[0].pattern.Regex"), std::string::npos) << regex;
  EXPECT_NE(regex.find("(a|b"), std::string::npos) << regex;
  const std::string pattern = error_of<CorruptInput>(with_split(
      "split_pattern", R"({"type": "Split", "pattern": {"Glob": "*"}, "behavior": "Isolated"})"));
  EXPECT_NE(pattern.find("pre_tokenizer.pretokenizers[0].pattern"), std::string::npos) << pattern;
}

// A Precompiled normalizer's charsmap: absent, not base64, or a blob that the .model path's
// checks refuse (Note [Precompiled charsmaps]): one error naming the field.
TEST(TokenizerErrors, BrokenPrecompiledCharsmapNamesTheField) {
  const auto with_normalizer = [](const std::string& name, const std::string& normalizer) {
    return write_tokenizer_json(
        name, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": )" +
                  normalizer + "}");
  };
  const std::string missing =
      error_of<CorruptInput>(with_normalizer("pc_missing", R"({"type": "Precompiled"})"));
  EXPECT_NE(missing.find("normalizer.precompiled_charsmap"), std::string::npos) << missing;
  const std::string not_base64 = error_of<CorruptInput>(
      with_normalizer("pc_base64", R"({"type": "Precompiled", "precompiled_charsmap": "AB!D"})"));
  EXPECT_NE(not_base64.find("not base64"), std::string::npos) << not_base64;
  // "AAQAAABh": a header announcing a 1024-byte trie, then one byte.
  const std::string broken = error_of<CorruptInput>(with_normalizer(
      "pc_broken", R"({"type": "Precompiled", "precompiled_charsmap": "AAQAAABh"})"));
  EXPECT_NE(broken.find("precompiled_charsmap is broken"), std::string::npos) << broken;
  EXPECT_NE(broken.find("normalizer.precompiled_charsmap"), std::string::npos) << broken;
}

}  // namespace
}  // namespace libai::tokenizers
