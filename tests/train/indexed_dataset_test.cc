// Indexed datasets against files written from Megatron's documented layout by
// tools/make_indexed_fixtures.py (tests/data/indexed/): every case reads back as its JSON says,
// our writer reproduces each integer case byte for byte, and corrupt variants (made here by
// patching the documented fields) each fail with one CorruptInput naming the file and field.
#include "train/data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/config/test_files.h"

namespace libai::train::data {
namespace {

using nlohmann::json;
const std::string kFolder = LIBAI_SOURCE_DIR "/tests/data/indexed/";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json contents() {
  std::ifstream in(kFolder + "contents.json");
  return json::parse(in);
}

const json& find_case(const json& all, const std::string& name) {
  for (const auto& c : all["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no fixture case " + name);
}

void expect_matches(const IndexedDataset& data, const json& c) {
  const auto sequences = c["sequences"].get<std::vector<std::vector<int64_t>>>();
  EXPECT_EQ(int(data.token_dtype()), c["dtype_code"].get<int>()) << c["name"];
  EXPECT_EQ(token_dtype_name(data.token_dtype()), c["dtype"].get<std::string>());
  ASSERT_EQ(data.size(), int64_t(sequences.size())) << c["name"];
  int64_t total = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    EXPECT_EQ(data.length(int64_t(i)), int64_t(sequences[i].size()));
    EXPECT_EQ(data.get(int64_t(i)), sequences[i]) << c["name"] << " sequence " << i;
    total += int64_t(sequences[i].size());
  }
  EXPECT_EQ(data.total_tokens(), total);
  EXPECT_EQ(data.document_indices(), c["document_indices"].get<std::vector<int64_t>>());
  EXPECT_EQ(data.document_count(), int64_t(c["document_indices"].size()) - 1);
}

TEST(IndexedDataset, ReadsEveryMegatronLayoutFixture) {
  const json all = contents();
  ASSERT_GE(all["cases"].size(), 9u);
  for (const auto& c : all["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    expect_matches(IndexedDataset::open(kFolder + c["name"].get<std::string>()), c);
  }
}

TEST(IndexedDataset, PartialReadsAreSlicesOfTheSequence) {
  const json all = contents();
  const json& c = find_case(all, "gpt_uint16");
  const auto data = IndexedDataset::open(kFolder + "gpt_uint16");
  const auto first = c["sequences"][0].get<std::vector<int64_t>>();
  ASSERT_GE(first.size(), 3u);
  EXPECT_EQ(data.get(0, 1), std::vector<int64_t>(first.begin() + 1, first.end()));
  EXPECT_EQ(data.get(0, 1, 2), std::vector<int64_t>(first.begin() + 1, first.begin() + 3));
  EXPECT_EQ(data.get(0, int64_t(first.size())), std::vector<int64_t>{});
  EXPECT_EQ(data.get(0, 0)[0], 65535);  // the top of uint16 is not sign-extended
  EXPECT_THROW(data.get(0, 0, int64_t(first.size()) + 1), InvalidArgument);
  EXPECT_THROW(data.get(0, -1), InvalidArgument);
  EXPECT_THROW(data.get(data.size()), InvalidArgument);
  EXPECT_THROW(data.length(-1), InvalidArgument);
}

TEST(IndexedDatasetWriter, ByteIdenticalToTheDocumentedLayout) {
  const json all = contents();
  config::testing::TempDir scratch;
  int written = 0;
  for (const auto& c : all["cases"]) {
    const std::string name = c["name"];
    const auto type = TokenDType(c["dtype_code"].get<int>());
    if (type == TokenDType::f32 || type == TokenDType::f64) continue;  // we write integers only
    SCOPED_TRACE(name);
    const auto sequences = c["sequences"].get<std::vector<std::vector<int64_t>>>();
    const auto documents = c["document_indices"].get<std::vector<int64_t>>();
    const std::string prefix = scratch.file(name);
    {
      IndexedDatasetWriter writer(prefix, type);
      for (size_t d = 0; d + 1 < documents.size(); ++d) {
        for (int64_t i = documents[d]; i < documents[d + 1]; ++i)
          writer.add_sequence(sequences[size_t(i)]);
        writer.end_document();
      }
      writer.finish();
    }
    EXPECT_EQ(read_bytes(prefix + ".bin"), read_bytes(kFolder + name + ".bin"));
    EXPECT_EQ(read_bytes(prefix + ".idx"), read_bytes(kFolder + name + ".idx"));
    expect_matches(IndexedDataset::open(prefix), c);
    ++written;
  }
  EXPECT_EQ(written, 7);
}

TEST(IndexedDatasetWriter, RangeChecksTokensAndCleansUpWhenNotFinished) {
  config::testing::TempDir scratch;
  const std::string prefix = scratch.file("out");
  {
    IndexedDatasetWriter writer(prefix, TokenDType::u16);
    writer.add_sequence({1, 65535});
    try {
      writer.add_sequence({3, 65536});
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("token 65536 at position 1 of sequence 1"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("uint16"), std::string::npos);
    }
    EXPECT_THROW(writer.add_sequence({-1}), InvalidArgument);
  }  // not finished: nothing left behind
  EXPECT_TRUE(std::filesystem::is_empty(scratch.path()));
  EXPECT_THROW(IndexedDatasetWriter(prefix, TokenDType::f32), InvalidArgument);
  IndexedDatasetWriter wide(prefix, TokenDType::i32);
  EXPECT_THROW(wide.add_sequence({int64_t(1) << 31}), InvalidArgument);
  EXPECT_EQ(optimal_token_dtype(50257), TokenDType::u16);
  EXPECT_EQ(optimal_token_dtype(65499), TokenDType::u16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::i32);
}

// ---- corrupt files ----------------------------------------------------------------------------

constexpr size_t kHeader = 34;  // magic 9, version 8, code 1, N 8, D 8

template <typename T>
void poke(std::string& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

// One corrupt variant of gpt_uint16: `edit` changes the (idx, bin) bytes; opening must throw
// CorruptInput whose message holds every piece of `expected`.
void expect_corrupt(const std::string& what,
                    const std::function<void(std::string&, std::string&)>& edit,
                    const std::vector<std::string>& expected) {
  SCOPED_TRACE(what);
  std::string idx = read_bytes(kFolder + "gpt_uint16.idx");
  std::string bin = read_bytes(kFolder + "gpt_uint16.bin");
  edit(idx, bin);
  // Through files (the mmap path) and from memory (the fuzzer's path).
  config::testing::TempDir scratch;
  scratch.write("bad.idx", idx);
  scratch.write("bad.bin", bin);
  for (int through_files = 0; through_files < 2; ++through_files) {
    try {
      if (through_files)
        (void)IndexedDataset::open(scratch.file("bad"));
      else
        (void)IndexedDataset::open_bytes(idx, bin, "mem/bad");
      ADD_FAILURE() << "opened without an error";
    } catch (const CorruptInput& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      EXPECT_NE(message.find("bad."), std::string::npos) << message;  // names the file
      for (const auto& piece : expected)
        EXPECT_NE(message.find(piece), std::string::npos) << message;
    }
  }
}

TEST(IndexedDataset, CorruptFilesAreOneClearError) {
  const json all = contents();
  const json& c = find_case(all, "gpt_uint16");
  const size_t n = c["sequences"].size();
  const size_t d = c["document_indices"].size();
  const size_t lengths = kHeader, pointers = kHeader + 4 * n, documents = kHeader + 12 * n;

  expect_corrupt("empty idx", [](auto& idx, auto&) { idx.clear(); },
                 {"bad.idx", "header", "truncated"});
  expect_corrupt("truncated header", [](auto& idx, auto&) { idx.resize(20); },
                 {"header", "truncated"});
  expect_corrupt("truncated body", [](auto& idx, auto&) { idx.pop_back(); },
                 {"bad.idx", "byte 26"});
  expect_corrupt("trailing bytes", [](auto& idx, auto&) { idx += "xyz"; }, {"document count"});
  expect_corrupt("wrong magic", [](auto& idx, auto&) { idx[0] = 'X'; }, {"magic", "byte 0"});
  expect_corrupt("wrong version", [](auto& idx, auto&) { poke<uint64_t>(idx, 9, 2); },
                 {"version", "byte 9", "2"});
  expect_corrupt("unknown dtype code", [](auto& idx, auto&) { idx[17] = 9; }, {"dtype code", "9"});
  expect_corrupt("lying sequence count",
                 [](auto& idx, auto&) { poke<uint64_t>(idx, 18, uint64_t(1) << 62); },
                 {"sequence count", "byte 18"});
  expect_corrupt("lying document count", [d](auto& idx, auto&) { poke<uint64_t>(idx, 26, d + 1); },
                 {"document count", "byte 26"});
  expect_corrupt("negative length", [=](auto& idx, auto&) { poke<int32_t>(idx, lengths + 4, -3); },
                 {"sequence length", "negative", "byte " + std::to_string(lengths + 4)});
  expect_corrupt("lying length", [=](auto& idx, auto&) { poke<int32_t>(idx, lengths, 1000); },
                 {"sequence pointer", "byte " + std::to_string(pointers + 8)});
  expect_corrupt("pointer not cumulative",
                 [=](auto& idx, auto&) { poke<int64_t>(idx, pointers + 16, 2); },
                 {"sequence pointer", "of sequence 2"});
  expect_corrupt("pointer past the bin",
                 [=](auto& idx, auto&) { poke<int64_t>(idx, pointers, 1 << 20); },
                 {"sequence pointer", "of sequence 0"});
  expect_corrupt("bin too short", [](auto&, auto& bin) { bin.pop_back(); },
                 {"bad.bin", "truncated"});
  expect_corrupt("bin too long", [](auto&, auto& bin) { bin += "ab"; }, {"bad.bin", "describes"});
  expect_corrupt("doc_idx not from 0", [=](auto& idx, auto&) { poke<int64_t>(idx, documents, 1); },
                 {"document index", "entry 0"});
  expect_corrupt("doc_idx out of order",
                 [=](auto& idx, auto&) { poke<int64_t>(idx, documents + 16, 0); },
                 {"document index", "entry 2", "below entry 1"});
  expect_corrupt("doc_idx past N",
                 [=](auto& idx, auto&) { poke<int64_t>(idx, documents + 8, int64_t(n) + 5); },
                 {"document index", "past the"});
  expect_corrupt(
      "doc_idx not ending at N",
      [=](auto& idx, auto&) { poke<int64_t>(idx, documents + 8 * (d - 1), int64_t(n) - 1); },
      {"document index", "last entry"});
}

TEST(IndexedDataset, MissingFilesAreNotFound) {
  config::testing::TempDir scratch;
  EXPECT_THROW(IndexedDataset::open(scratch.file("nothing")), NotFound);
  scratch.write("half.idx", read_bytes(kFolder + "gpt_uint16.idx"));
  try {
    (void)IndexedDataset::open(scratch.file("half"));
    ADD_FAILURE();
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("half.bin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace libai::train::data
