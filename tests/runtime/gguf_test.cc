// The GGUF reader (runtime/checkpoint/gguf.h): a well-formed file read back field by field, and
// every kind of malformed file rejected with one error naming the file and the field.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/checkpoint/gguf.h"
#include "tests/common/gguf_builder.h"

namespace libai::checkpoint {
namespace {

using testing::GgufBuilder;

GgufFile open(const std::string& bytes) {
  return GgufFile::open_bytes(bytes.data(), bytes.size(), "crafted.gguf");
}

std::string floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// A valid file: two metadata entries and a 2 x 3 f32 tensor.
GgufBuilder valid() {
  GgufBuilder b;
  b.kv_string("general.architecture", "llama");
  b.kv_u32("llama.block_count", 2);
  b.tensor("w", {3, 2}, 0, 0);
  return b;
}

const std::string kSixFloats = floats({1, 2, 3, 4, 5, 6});

void expect_error(const std::string& bytes, const std::string& needle) {
  try {
    (void)open(bytes);
    ADD_FAILURE() << "accepted a file that should fail with '" << needle << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("crafted.gguf"), std::string::npos) << what;
  }
}

TEST(GgufRead, ValidFileReadsBack) {
  const auto f = open(valid().build(kSixFloats));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 2);
  EXPECT_EQ(f.get_int("missing", 7), 7);
  ASSERT_EQ(f.names(), std::vector<std::string>{"w"});
  EXPECT_EQ(f.info("w").shape, (Shape{2, 3}));  // row-major: the file's dims reversed
  EXPECT_EQ(f.tensor("w").to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(f.get_string("llama.block_count"), CorruptInput);  // a u32, not a string
  EXPECT_THROW(f.get_int("missing"), CorruptInput);
  EXPECT_THROW(f.info("nope"), NotFound);
}

TEST(GgufRead, BlocksDequantise) {
  // One Q8_0 block (d = 0.5 as f16 0x3800, q = -16..15) and one Q4_0 block (d = 2, nibbles
  // j: low = j % 16, high = 15 - j % 16).
  std::string q8("\x00\x38", 2);
  for (int i = 0; i < 32; ++i) q8 += char(int8_t(i - 16));
  std::string q4("\x00\x40", 2);
  for (int j = 0; j < 16; ++j) q4 += char(j | ((15 - j) << 4));
  GgufBuilder b;
  b.tensor("q8", {32}, 8, 0);
  b.tensor("q4", {32}, 2, 64);
  const auto f = open(b.build(q8 + std::string(64 - q8.size(), '\0') + q4));
  const auto a = f.tensor("q8").to_vector<float>();
  const auto c = f.tensor("q4").to_vector<float>();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(a[size_t(i)], 0.5f * float(i - 16));
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(c[size_t(j)], 2.0f * float(j - 8));
    EXPECT_EQ(c[size_t(j + 16)], 2.0f * float(15 - j - 8));
  }
}

TEST(GgufRead, BadHeaderIsNamed) {
  auto b = valid();
  b.magic = 0x12345678;
  expect_error(b.build(kSixFloats), "bad magic");
  b = valid();
  b.version = 1;
  expect_error(b.build(kSixFloats), "version 1");
  b = valid();
  b.kv_count = 1000000;
  expect_error(b.build(kSixFloats), "metadata entries");
  b = valid();
  b.tensor_count = 1u << 30;
  expect_error(b.build(kSixFloats), "tensors in");
  const std::string whole = valid().build(kSixFloats);
  expect_error(whole.substr(0, 30), "claims 2 metadata entries in 6 bytes");
  expect_error(whole.substr(0, 60), "truncated reading metadata 'general.architecture'");
  expect_error(whole.substr(0, whole.size() - 4), "truncated file");
}

TEST(GgufRead, BadMetadataIsNamed) {
  GgufBuilder b;
  b.kv_raw("k", 13, "");
  expect_error(b.build(""), "metadata 'k' has value type 13");
  GgufBuilder s;
  std::string huge;
  s.u64(huge, uint64_t(1) << 40);
  s.kv_raw("name", 8, huge);
  expect_error(s.build(""), "truncated reading metadata 'name'");
  GgufBuilder a;
  std::string arr;
  a.u32(arr, 4);
  a.u64(arr, uint64_t(1) << 50);
  a.kv_raw("list", 9, arr);
  expect_error(a.build(""), "metadata 'list' claims");
  GgufBuilder n;  // arrays of arrays, 6 deep
  std::string nested;
  for (int i = 0; i < 6; ++i) {
    n.u32(nested, 9);
    n.u64(nested, 1);
  }
  n.kv_raw("deep", 9, nested);
  expect_error(n.build(""), "nests arrays");
  GgufBuilder d;
  d.kv_u32("k", 1);
  d.kv_u32("k", 2);
  expect_error(d.build(""), "'k' appears twice");
  GgufBuilder bo;
  bo.kv_raw("flag", 7, "\x02");
  expect_error(bo.build(""), "bool of byte 2");
  GgufBuilder al;
  al.kv_u32("general.alignment", 3);
  expect_error(al.build(""), "general.alignment");
}

TEST(GgufRead, BadTensorsAreNamed) {
  auto tensor_file = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                        size_t data = 64) {
    GgufBuilder b;
    b.tensor("t", ne, type, offset);
    return b.build(std::string(data, '\0'));
  };
  expect_error(tensor_file({1, 1, 1, 1, 1}, 0, 0), "tensor 't' has 5 dimensions");
  expect_error(tensor_file({uint64_t(1) << 41}, 0, 0), "dimension 0 of 2199023255552");
  expect_error(tensor_file({32}, 99, 0), "tensor type 99");
  expect_error(tensor_file({16}, 2, 0), "not a multiple of its block of 32");
  expect_error(tensor_file({4}, 0, 8), "not a multiple of the alignment");
  expect_error(tensor_file({4}, 0, 64), "offset out of range");
  expect_error(tensor_file({64}, 0, 0), "truncated file");  // 256 bytes asked, 64 there
  expect_error(tensor_file({uint64_t(1) << 39, uint64_t(1) << 39}, 0, 0), "overflows");
  GgufBuilder twice;
  twice.tensor("t", {4}, 0, 0);
  twice.tensor("t", {4}, 0, 32);
  expect_error(twice.build(std::string(64, '\0')), "tensor 't' appears twice");
  GgufBuilder k2;
  k2.tensor("k", {256}, 10, 0);  // Q2_K: known, not dequantised
  const auto f = open(k2.build(std::string(84, '\0')));
  EXPECT_THROW((void)f.tensor("k"), Unsupported);
}

TEST(GgufRead, RecognisesGgufFiles) {
  EXPECT_FALSE(is_gguf_file(LIBAI_SOURCE_DIR "/README.md"));
  EXPECT_TRUE(is_gguf_file(LIBAI_SOURCE_DIR "/tests/data/gguf/tok_gpt2.gguf"));
  EXPECT_FALSE(is_gguf_file(LIBAI_SOURCE_DIR "/tests/data"));
}

}  // namespace
}  // namespace libai::checkpoint
