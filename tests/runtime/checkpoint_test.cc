// safetensors: values against the fixtures written by the Python safetensors package, slice
// reads, write -> read round trips, sharded indexes, and every kind of bad input.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/checkpoint/safetensors.h"
#include "tests/runtime/checkpoint_fixtures.h"

namespace libai::checkpoint {
namespace {

using namespace testing;

// A safetensors file from a header text and `data_bytes` bytes of data.
std::string make_safetensors(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x01');
}

SafetensorsFile open_text(const std::string& header, size_t data_bytes) {
  const std::string bytes = make_safetensors(header, data_bytes);
  return SafetensorsFile::open_bytes(bytes.data(), bytes.size(), "crafted.safetensors");
}

TEST(SafetensorsRead, ValuesMatchExpected) {
  const auto& want = expected()["safetensors"];
  auto file = SafetensorsFile::open(fixture("small.safetensors"));
  EXPECT_EQ(file.names().size(), want["tensors"].size());
  for (const auto& [name, entry] : want["tensors"].items()) {
    ASSERT_TRUE(file.contains(name)) << name;
    expect_matches(file.tensor(name), entry, name);
    const auto& info = file.info(name);
    EXPECT_EQ(info.end - info.begin, file.tensor(name).nbytes());
  }
  EXPECT_EQ(file.metadata(), want["metadata"].get<Metadata>());
  EXPECT_THROW(file.info("no.such.tensor"), NotFound);
}

TEST(SafetensorsRead, TensorsAreZeroCopyViewsThatOutliveTheFileObject) {
  Tensor kept;
  {
    auto file = SafetensorsFile::open(fixture("small.safetensors"));
    kept = file.tensor("f32");
    EXPECT_EQ(file.tensor("f32").data_ptr(), kept.data_ptr());  // the mapping, not a copy
    EXPECT_NE(kept.storage()->keep_alive, nullptr);
  }
  expect_matches(kept, expected()["safetensors"]["tensors"]["f32"], "f32");
  // Writes go to private copy-on-write pages, never to the file.
  kept.data<float>()[0] = 123.0f;
  auto again = SafetensorsFile::open(fixture("small.safetensors"));
  expect_matches(again.tensor("f32"), expected()["safetensors"]["tensors"]["f32"], "f32");
}

TEST(SafetensorsRead, SlicesMatchTheFullTensor) {
  auto file = SafetensorsFile::open(fixture("small.safetensors"));
  for (const std::string name : {"slice_me", "f16", "transposed", "i64"}) {
    SCOPED_TRACE(name);
    Tensor full = file.tensor(name);
    const int64_t rows = full.size(0), cols = full.size(1);
    const auto all = full.to_vector<double>();
    // Rows [1, rows): a zero-copy view at the right offset.
    Tensor rows_slice = file.slice(name, 0, 1, rows - 1);
    EXPECT_EQ(rows_slice.data_ptr(),
              static_cast<char*>(full.data_ptr()) + cols * full.element_size());
    EXPECT_EQ(rows_slice.to_vector<double>(), std::vector<double>(all.begin() + cols, all.end()));
    // Columns [1, cols - 1) of every row: a copy of the strided runs.
    Tensor col_slice = file.slice(name, -1, 1, cols - 2);
    EXPECT_EQ(col_slice.shape(), (Shape{rows, cols - 2}));
    std::vector<double> want;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 1; c < cols - 1; ++c) want.push_back(all[size_t(r * cols + c)]);
    }
    EXPECT_EQ(col_slice.to_vector<double>(), want);
  }
  EXPECT_EQ(file.slice("slice_me", 1, 2, 0).numel(), 0);
  expect_error<InvalidArgument>([&] { file.slice("slice_me", 1, 4, 3); },
                                {"slice_me", "[4, 7)", "[4, 6]"});
  EXPECT_THROW(file.slice("slice_me", 2, 0, 1), InvalidArgument);
  EXPECT_THROW(file.slice("scalar", 0, 0, 1), InvalidArgument);
}

TEST(SafetensorsWrite, RoundTripKeepsValuesOrderAndMetadata) {
  ScratchDir dir;
  Tensor base = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor bf = Tensor::empty({3}, DType::bf16);
  bf.copy_from(Tensor::from_vector<float>({0.5f, -2.0f, 3.25f}));
  Tensor flags = Tensor::empty({2}, DType::boolean);
  flags.data<bool>()[0] = true;
  flags.data<bool>()[1] = false;
  NamedTensors tensors = {{"w.transposed", base.as_strided({3, 2}, {1, 3}, 0)},
                          {"bf", bf},
                          {"ids", Tensor::from_vector<int64_t>({-1, 1LL << 40})},
                          {"flags", flags},
                          {"empty", Tensor::zeros({0, 3})},
                          {"scalar", Tensor::scalar(7.0, DType::f64)}};
  const std::string path = dir.file("out.safetensors");
  save_safetensors(path, tensors, {{"format", "pt"}});
  save_safetensors(path, tensors, {{"format", "pt"}});  // replacing an existing file
  auto file = SafetensorsFile::open(path);
  // Data order: widest dtype first, the given order among equals.
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{"ids", "scalar", "w.transposed", "empty", "bf", "flags"}));
  for (const auto& [name, tensor] : tensors) {
    Tensor back = file.tensor(name);
    EXPECT_EQ(back.dtype(), tensor.dtype()) << name;
    EXPECT_EQ(back.shape(), tensor.shape()) << name;
    EXPECT_EQ(back.to_vector<double>(), tensor.to_vector<double>()) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(back.data_ptr()) % back.element_size(), 0u) << name;
    EXPECT_NE(back.storage()->keep_alive, nullptr) << name << ": mapped, not copied";
  }
  EXPECT_EQ(file.metadata().at("format"), "pt");
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "no temporary file left behind";
}

TEST(SafetensorsWrite, RereadsThePythonFixtureByteForByte) {
  auto file = SafetensorsFile::open(fixture("small.safetensors"));
  NamedTensors tensors;
  for (const auto& name : file.names()) tensors.emplace_back(name, file.tensor(name));
  const std::string bytes = serialize_safetensors(tensors, file.metadata());
  auto back = SafetensorsFile::open_bytes(bytes.data(), bytes.size());
  for (const auto& name : file.names()) {
    EXPECT_EQ(back.tensor(name).to_vector<double>(), file.tensor(name).to_vector<double>());
  }
  EXPECT_THROW(serialize_safetensors({{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}}),
               InvalidArgument);
  EXPECT_THROW(serialize_safetensors({{"__metadata__", Tensor::zeros({1})}}), InvalidArgument);
}

TEST(SafetensorsCorrupt, TruncatedFilesAreRejectedWithTheirNumbers) {
  ScratchDir dir;
  const std::string bytes = read_bytes(fixture("small.safetensors"));
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  for (size_t keep : {size_t(0), size_t(5), size_t(8), size_t(8 + header_len - 1),
                      size_t(8 + header_len), bytes.size() - 1}) {
    SCOPED_TRACE(keep);
    const std::string path = dir.file("cut_" + std::to_string(keep) + ".safetensors");
    write_bytes(path, bytes.substr(0, keep));
    expect_error<CorruptInput>([&] { SafetensorsFile::open(path); }, {path});
  }
  const std::string path = dir.file("cut.safetensors");
  write_bytes(path, bytes.substr(0, bytes.size() - 3));
  expect_error<CorruptInput>([&] { SafetensorsFile::open(path); },
                             {"truncated", std::to_string(bytes.size() - 3 - 8 - header_len)});
}

TEST(SafetensorsCorrupt, OffsetsThatLieAreRejected) {
  expect_error<CorruptInput>(
      [] { open_text(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12); },
      {"crafted.safetensors", "'w'", "needs 8 bytes", "[0, 12]", "span 12"});
  expect_error<CorruptInput>(
      [] { open_text(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8); },
      {"'w'", "backwards"});
  expect_error<CorruptInput>(
      [] { open_text(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8); },
      {"'w'", "ends at byte 16", "only 8 bytes"});
  expect_error<CorruptInput>(
      [] {
        open_text(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  12);
      },
      {"'b'", "overlaps tensor 'a'", "ending at 8"});
  expect_error<CorruptInput>(
      [] { open_text(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4); },
      {"'a'", "hole"});
  expect_error<CorruptInput>(
      [] { open_text(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 5); },
      {"cover 2 bytes", "has 5"});
  expect_error<CorruptInput>(
      [] {
        open_text(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
                  0);
      },
      {"'a'", "overflows"});
}

TEST(SafetensorsCorrupt, BadHeadersAreRejected) {
  expect_error<Unsupported>(
      [] { open_text(R"({"q":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1); },
      {"'q'", "F8_E4M3", "BF16"});
  expect_error<CorruptInput>([] { open_text(R"({"a": [1, 2)", 0); }, {"not valid JSON"});
  expect_error<CorruptInput>([] { open_text(R"([1, 2])", 0); }, {"expected a JSON object"});
  expect_error<CorruptInput>(
      [] { open_text(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0); },
      {"'a'", "-1"});
  expect_error<CorruptInput>([] { open_text(R"({"a":{"dtype":"U8","shape":[1]}})", 1); },
                             {"'a'", "data_offsets"});
  expect_error<CorruptInput>([] { open_text(R"({"__metadata__":{"k":1}})", 0); },
                             {"__metadata__", "'k'"});
  std::string huge = make_safetensors("{}", 0);
  huge[5] = 1;  // header length 2^40
  expect_error<CorruptInput>([&] { SafetensorsFile::open_bytes(huge.data(), huge.size()); },
                             {"header length 1099511627778", "exceeds"});
  EXPECT_THROW(SafetensorsFile::open("/nonexistent/model.safetensors"), NotFound);
  auto empty = open_text("{}", 0);
  EXPECT_TRUE(empty.names().empty());
}

TEST(SafetensorsCorrupt, BoolBytesOtherThanZeroOrOneAreRejected) {
  // Reading byte 2 as a C++ bool would be undefined behaviour, so the view is refused.
  const std::string bytes =
      make_safetensors(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", 0) +
      std::string("\x01\x00\x02", 3);
  auto file = SafetensorsFile::open_bytes(bytes.data(), bytes.size(), "bools.safetensors");
  expect_error<CorruptInput>([&] { file.tensor("b"); },
                             {"bools.safetensors", "bool element 2", "byte value 2"});
  EXPECT_EQ(file.slice("b", 0, 0, 2).to_vector<int>(), (std::vector<int>{1, 0}));
}

TEST(SafetensorsSharded, IndexMapsNamesToLazilyOpenedShards) {
  const auto& want = expected()["sharded"];
  auto sharded = load_index(fixture("sharded"));
  EXPECT_EQ(sharded.names(), (std::vector<std::string>{"a.bias", "a.weight", "b.weight"}));
  for (const auto& [name, entry] : want["tensors"].items()) {
    EXPECT_EQ(sharded.file_of(name), entry["file"].get<std::string>());
    expect_matches(sharded.tensor(name), entry, name);
  }
  Tensor col = sharded.slice("b.weight", 1, 1, 1);
  const auto full = sharded.tensor("b.weight").to_vector<double>();
  EXPECT_EQ(col.to_vector<double>(), (std::vector<double>{full[1], full[3], full[5], full[7]}));
  EXPECT_EQ(sharded.metadata().at("total_size"), std::to_string(want["total_size"].get<int>()));
  EXPECT_EQ(&sharded.shard_of("a.bias"), &sharded.shard_of("a.weight"));
  EXPECT_THROW(sharded.tensor("c.weight"), NotFound);
}

TEST(SafetensorsSharded, MissingOrEscapingShardsAreNamed) {
  ScratchDir dir;
  fs::copy(fixture("sharded"), dir.path());
  fs::remove(dir.path() / "model-00002-of-00002.safetensors");
  expect_error<NotFound>([&] { load_index(dir.path().string()); },
                         {"model-00002-of-00002.safetensors", "missing"});
  write_bytes(dir.file("model.safetensors.index.json"),
              R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  expect_error<CorruptInput>([&] { load_index(dir.path().string()); },
                             {"'a'", "../elsewhere.safetensors"});
  EXPECT_THROW(load_index(dir.file("nothing_here")), NotFound);
}

}  // namespace
}  // namespace libai::checkpoint
