// SentencePiece .model tokenizers against tests/data/tokenizers/sentencepiece*/expected.json
// (tools/make_sentencepiece_fixtures.py: Python sentencepiece driven like transformers' slow
// T5Tokenizer / LlamaTokenizer, cross-checked there against transformers' own classes).
#include "models/tokenizers/sentencepiece.h"

#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fixture(const std::string& name) {
  return fs::path(LIBAI_SOURCE_DIR) / "tests" / "data" / "tokenizers" / name;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh folder under the test's temp dir holding `files` (name -> bytes).
fs::path make_folder(const std::string& name, const std::map<std::string, std::string>& files) {
  const fs::path folder = fs::path(testing::TempDir()) / ("libai_sp_" + name);
  fs::remove_all(folder);
  fs::create_directories(folder);
  for (const auto& [file, bytes] : files) std::ofstream(folder / file, std::ios::binary) << bytes;
  return folder;
}

class SentencePieceParity : public testing::TestWithParam<std::string> {};

TEST_P(SentencePieceParity, MatchesReference) {
  const std::string name = GetParam();
  const auto tok = load_tokenizer(fixture(name));
  std::ifstream in(fixture(name) / "expected.json");
  const json expected = json::parse(in);
  size_t checked = 0;
  for (const json& c : expected["cases"]) {
    const std::string text = c["text"];
    const bool add = c["add_special_tokens"];
    SCOPED_TRACE(name + ": text '" + text + "' add_special_tokens=" + (add ? "1" : "0"));
    const Encoding e = tok->encode(text, add);
    EXPECT_EQ(e.ids, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(e.tokens, c["tokens"].get<std::vector<std::string>>());
    EXPECT_EQ(tok->decode(c["ids"], false), c["decode"].get<std::string>());
    EXPECT_EQ(tok->decode(c["ids"], true), c["decode_skip"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 40u);
}

INSTANTIATE_TEST_SUITE_P(SentencePieceFixtures, SentencePieceParity,
                         testing::Values("sentencepiece", "sentencepiece_llama"));

TEST(SentencePiece, T5SpecialTokensAndPadding) {
  const auto tok = load_tokenizer(fixture("sentencepiece") / "spiece.model");
  EXPECT_EQ(tok->token_to_id("<pad>"), 0);
  EXPECT_EQ(tok->token_to_id("</s>"), 1);
  EXPECT_EQ(tok->token_to_id("<unk>"), 2);
  EXPECT_EQ(tok->token_to_id("<extra_id_1>"), 4);
  EXPECT_EQ(tok->token_to_id("<s>"), std::nullopt);  // the T5 fixture has no bos
  EXPECT_EQ(tok->id_to_token(300), std::nullopt);
  EXPECT_EQ(tok->vocab_size(), 300u);
  EXPECT_EQ(tok->special_tokens().eos, "</s>");
  EXPECT_EQ(tok->special_tokens().pad, "<pad>");
  EncodeOptions options;
  options.padding = Padding::longest;
  const auto batch = tok->encode_batch({"hello", "hello world again"}, options);
  ASSERT_EQ(batch[0].ids.size(), batch[1].ids.size());
  EXPECT_EQ(batch[0].ids.back(), 0);  // padded with <pad>
  EXPECT_EQ(batch[1].ids.back(), 1);  // </s>
  EXPECT_EQ(batch[0].attention_mask.back(), 0);
}

TEST(SentencePiece, ConfigChangesSpecialTokens) {
  // T5's real configs: extra_ids past the vocabulary (<extra_id_0> last), and flags to add
  // bos / drop eos; the tokenizer_class decides the default when the file name does not.
  const std::string model = read_bytes(fixture("sentencepiece") / "spiece.model");
  const auto folder = make_folder("config", {{"tokenizer.model", model},
                                             {"tokenizer_config.json",
                                              R"({"tokenizer_class": "T5Tokenizer", "extra_ids": 5,
                      "bos_token": "<extra_id_2>", "add_bos_token": true})"}});
  const auto tok = load_tokenizer(folder);
  EXPECT_EQ(tok->token_to_id("<extra_id_2>"), 5);  // in the model: its own id
  EXPECT_EQ(tok->token_to_id("<extra_id_3>"), 301);
  EXPECT_EQ(tok->token_to_id("<extra_id_4>"), 300);
  EXPECT_EQ(tok->vocab_size(), 302u);
  const Encoding e = tok->encode("a<extra_id_4>");
  EXPECT_EQ(e.ids.front(), 5);  // bos
  EXPECT_EQ(e.ids.back(), 1);   // eos: T5Tokenizer
  EXPECT_EQ(e.ids[e.ids.size() - 2], 300);
  EXPECT_EQ(tok->decode(e.ids, true), "a");

  const auto no_eos = make_folder(
      "no_eos",
      {{"spiece.model", model}, {"tokenizer_config.json", R"({"add_eos_token": false})"}});
  EXPECT_EQ(load_tokenizer(no_eos)->encode("a").ids.size(), 1u);
  const auto bad = make_folder(
      "no_bos", {{"spiece.model", model}, {"tokenizer_config.json", R"({"add_bos_token": true})"}});
  EXPECT_THROW(load_tokenizer(bad), CorruptInput);  // the T5 fixture has no bos to add
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

TEST(SentencePieceErrors, CorruptModelsNameTheFile) {
  const std::string model = read_bytes(fixture("sentencepiece") / "spiece.model");
  ASSERT_GT(model.size(), 1000u);
  std::mt19937 random(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(random());
  const std::map<std::string, std::string> corrupt = {
      {"truncated", model.substr(0, model.size() / 2)},
      {"noise", noise},
      {"empty", ""},
      {"text", "this is not a protobuf\n"}};
  for (const auto& [name, bytes] : corrupt) {
    SCOPED_TRACE(name);
    const auto folder = make_folder("corrupt_" + name, {{"spiece.model", bytes}});
    EXPECT_NE(error_of<CorruptInput>(folder).find("spiece.model"), std::string::npos);
    const auto file = folder / "random_name.model";
    fs::rename(folder / "spiece.model", file);
    EXPECT_NE(error_of<CorruptInput>(file).find("random_name.model"), std::string::npos);
  }
  EXPECT_NE(error_of<NotFound>(fixture("sentencepiece") / "missing.model").find("missing.model"),
            std::string::npos);
  const auto bad_config =
      make_folder("bad_config", {{"spiece.model", model}, {"tokenizer_config.json", "{oops"}});
  EXPECT_NE(error_of<CorruptInput>(bad_config).find("tokenizer_config.json"), std::string::npos);
}

// Where the normalizer_spec's precompiled_charsmap lies in a .model file: the payload of field
// 2 inside ModelProto field 3 (both length-delimited; the fixture's lengths fit two bytes).
std::pair<size_t, size_t> charsmap_span(const std::string& model) {
  auto varint = [&](size_t& at) {
    uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      const auto byte = static_cast<uint8_t>(model.at(at++));
      value |= uint64_t(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
  };
  auto find_field = [&](size_t at, size_t end, uint64_t number) -> std::pair<size_t, size_t> {
    while (at < end) {
      const uint64_t tag = varint(at);
      switch (tag & 7) {
        case 0: varint(at); break;
        case 1: at += 8; break;
        case 5: at += 4; break;
        case 2: {
          const size_t length = size_t(varint(at));
          if ((tag >> 3) == number) return {at, length};
          at += length;
          break;
        }
        default: ADD_FAILURE() << "bad wire type"; return {0, 0};
      }
    }
    return {0, 0};
  };
  const auto [spec, spec_length] = find_field(0, model.size(), 3);
  return find_field(spec, spec + spec_length, 2);
}

// Note [Precompiled charsmaps]: libsentencepiece reads a charsmap without bounds; a broken one
// is a CorruptInput naming the file before the library sees it (the fuzzer's input that read
// past the strings, and two breaks of the fixture's own charsmap), and the intact one loads.
TEST(SentencePieceErrors, BrokenCharsmapsAreRefusedBeforeTheLibraryReadsThem) {
  const std::string model = read_bytes(fixture("sentencepiece") / "spiece.model");
  const auto [at, length] = charsmap_span(model);
  ASSERT_GT(length, 1024u);
  std::string no_nul = model, bad_header = model;
  no_nul[at + length - 1] = 'x';  // the strings' last NUL
  bad_header[at] = char(bad_header[at] ^ 0x04);  // the trie's size: no longer whole blocks
  for (const auto& [name, bytes] : std::map<std::string, std::string>{
           {"no_nul", no_nul}, {"bad_header", bad_header}}) {
    SCOPED_TRACE(name);
    const auto folder = make_folder("charsmap_" + name, {{"spiece.model", bytes}});
    const std::string message = error_of<CorruptInput>(folder);
    EXPECT_NE(message.find("spiece.model"), std::string::npos) << message;
    EXPECT_NE(message.find("precompiled_charsmap is broken"), std::string::npos) << message;
  }
  const fs::path fuzzed = fs::path(LIBAI_SOURCE_DIR) / "tests/data/tokenizers/corrupt" /
                          "charsmap_past_the_strings.model";
  EXPECT_NE(error_of<CorruptInput>(fuzzed).find("precompiled_charsmap is broken"),
            std::string::npos);
  EXPECT_NO_THROW(load_sentencepiece(fixture("sentencepiece") / "spiece.model"));
}

}  // namespace
}  // namespace libai::tokenizers
