// PyTorch zip checkpoints: values against torch.save fixtures, tied storages, the restricted
// unpickler refusing code, and corrupted archives.
#include <gtest/gtest.h>

#include "runtime/checkpoint/pickle.h"
#include "runtime/checkpoint/torch_zip.h"
#include "tests/runtime/checkpoint_fixtures.h"

namespace libai::checkpoint {
namespace {

using namespace testing;
using namespace std::string_literals;

std::string patched_small_bin(size_t offset, std::initializer_list<uint8_t> bytes) {
  std::string raw = read_bytes(fixture("small.bin"));
  for (uint8_t b : bytes) raw.at(offset++) = char(b);
  return raw;
}

TorchCheckpoint open_string(const std::string& bytes, const std::string& name) {
  return TorchCheckpoint::open_bytes(bytes.data(), bytes.size(), name);
}

TEST(TorchCheckpointLoad, ValuesStridesAndOrderMatchTorch) {
  const auto& want = expected()["torch"];
  auto loaded = load_torch_checkpoint(fixture("small.bin"));
  std::vector<std::string> names;
  for (const auto& [name, tensor] : loaded) {
    names.push_back(name);
    const auto& entry = want["tensors"][name];
    expect_matches(tensor, entry, name);
    EXPECT_EQ(tensor.strides(), entry["strides"].get<Shape>()) << name;
  }
  EXPECT_EQ(names, want["names"].get<std::vector<std::string>>());
}

TEST(TorchCheckpointLoad, ViewsOfOneStorageShareIt) {
  const auto& want = expected()["torch"];
  auto ckpt = TorchCheckpoint::open(fixture("small.bin"));
  const auto tied = want["tied"].get<std::vector<std::string>>();
  EXPECT_TRUE(ckpt.tensor(tied[0]).shares_storage(ckpt.tensor(tied[1])));
  const auto shared = want["shared_storage"].get<std::vector<std::string>>();
  Tensor base = ckpt.tensor(shared[0]);
  for (const auto& name : shared) {
    EXPECT_TRUE(ckpt.tensor(name).shares_storage(base)) << name;
    EXPECT_EQ(ckpt.info(name).storage_offset, want["tensors"][name]["storage_offset"].get<int>());
  }
  EXPECT_FALSE(ckpt.tensor("model.half").shares_storage(base));
  EXPECT_NE(base.storage()->keep_alive, nullptr) << "a view of the mapped file, not a copy";
  EXPECT_FALSE(ckpt.tensor("model.transposed").is_contiguous());
}

TEST(TorchCheckpointLoad, NonTensorValuesAreKeptAside) {
  auto ckpt = TorchCheckpoint::open(fixture("small.bin"));
  std::map<std::string, std::string> others(ckpt.other_values().begin(), ckpt.other_values().end());
  EXPECT_EQ(others,
            (expected()["torch"]["other_values"].get<std::map<std::string, std::string>>()));
  EXPECT_FALSE(ckpt.contains("epoch"));
  expect_error<NotFound>([&] { ckpt.tensor("model.nothing"); }, {"model.nothing"});
}

TEST(TorchCheckpointSecurity, ForbiddenGlobalsAreRefusedAndNothingRuns) {
  ScratchDir dir;
  const auto& want = expected()["evil"];
  const fs::path previous = fs::current_path();
  fs::current_path(dir.path());  // where os.system('touch ...') would leave its file
  for (const auto& [file, global] : want["files"].items()) {
    SCOPED_TRACE(file);
    expect_error<Unsupported>([&] { TorchCheckpoint::open(fixture(file)); },
                              {global.get<std::string>(), "allow-list", fixture(file)});
    const std::string bytes = read_bytes(fixture(file));
    EXPECT_THROW(open_string(bytes, file), Unsupported);
  }
  fs::current_path(previous);
  EXPECT_FALSE(fs::exists(dir.path() / want["sentinel"].get<std::string>()));
  EXPECT_FALSE(fs::exists(previous / want["sentinel"].get<std::string>()));
}

TEST(TorchCheckpointCorrupt, FlippedCentralDirectoryBytes) {
  const size_t cd = expected()["torch"]["central_directory_offset"].get<size_t>();
  // The signature of the first central directory entry.
  expect_error<CorruptInput>(
      [&] {
        open_string(patched_small_bin(cd, {0x00, 0xff}), "flip.bin");
      },
      {"flip.bin", "central directory entry 0"});
  // Its local header offset (bytes 42..45) pointed past the end of the file.
  expect_error<CorruptInput>(
      [&] {
        open_string(patched_small_bin(cd + 42, {0xff, 0xff, 0xff, 0x7f}), "offset.bin");
      },
      {"offset.bin", "local header", "outside"});
  // Its compressed size made huge.
  expect_error<CorruptInput>(
      [&] {
        open_string(patched_small_bin(cd + 20, {0xff, 0xff, 0xff, 0x7f}), "size.bin");
      },
      {"size.bin", "runs past"});
  const std::string raw = read_bytes(fixture("small.bin"));
  expect_error<CorruptInput>([&] { open_string(raw.substr(0, raw.size() - 30), "cut.bin"); },
                             {"cut.bin"});
  expect_error<CorruptInput>([&] { open_string("not a zip at all", "text.bin"); },
                             {"text.bin", "end-of-central-directory"});
  expect_error<Unsupported>([&] { open_string(patched_small_bin(cd + 10, {8}), "deflate.bin"); },
                            {"deflate.bin", "compressed"});
}

TEST(TorchCheckpointCorrupt, BadPicklesAreRejected) {
  const size_t pkl = expected()["torch"]["pickle_offset"].get<size_t>();
  // After PROTO 2: 0xff is no pickle opcode; 'i' (INST) is one a state dict never needs.
  expect_error<Unsupported>([&] { open_string(patched_small_bin(pkl + 2, {0xff}), "op.bin"); },
                            {"op.bin", "opcode 0xff", "at byte 2"});
  expect_error<Unsupported>([&] { open_string(patched_small_bin(pkl + 2, {'i'}), "inst.bin"); },
                            {"opcode 0x69"});
  // PROTO 9 does not exist.
  expect_error<Unsupported>([&] { open_string(patched_small_bin(pkl + 1, {9}), "proto.bin"); },
                            {"protocol 9"});
  // STOP right after PROTO leaves an empty stack.
  expect_error<CorruptInput>([&] { open_string(patched_small_bin(pkl + 2, {'.'}), "stop.bin"); },
                             {"STOP leaves 0 values"});
  const std::string legacy = "\x80\x02\x8a\x0a" + std::string(16, '\0');
  expect_error<Unsupported>([&] { open_string(legacy, "old.pth"); }, {"old.pth", "legacy"});
}

pickle::Value& unpickle(pickle::Unpickler& u) { return u.load(); }

TEST(TorchCheckpointPickle, PlainValuesCyclesAndErrors) {
  // [1, -2 (LONG1), 'x', 2.5, True, None] with the list appended to itself through the memo.
  const std::string ok =
      "\x80\x02]q\x00(K\x01\x8a\x01\xfe\x8c\x01xG\x40\x04\x00\x00\x00\x00\x00\x00\x88Nh\x00"
      "e."s;
  pickle::Unpickler u({reinterpret_cast<const uint8_t*>(ok.data()), ok.size()}, "ok.pkl", {});
  const auto& list = unpickle(u);
  ASSERT_EQ(list.kind, pickle::Value::Kind::list);
  ASSERT_EQ(list.items.size(), 7u);
  EXPECT_EQ(list.items[0]->integer, 1);
  EXPECT_EQ(list.items[1]->integer, -2);
  EXPECT_EQ(list.items[2]->text, "x");
  EXPECT_EQ(list.items[3]->floating, 2.5);
  EXPECT_TRUE(list.items[4]->boolean);
  EXPECT_EQ(list.items[5]->kind, pickle::Value::Kind::none);
  EXPECT_EQ(list.items[6], &list);  // a cycle, harmless in the arena

  auto run = [](const std::string& bytes) {
    pickle::Unpickler p({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "bad.pkl",
                        {});
    p.load();
  };
  expect_error<CorruptInput>([&] { run("\x80\x02h\x05."s); }, {"bad.pkl", "memo key 5"});
  expect_error<CorruptInput>(
      [&] {
        run("\x80\x02"
            "a.");
      },
      {"stack underflow"});
  expect_error<CorruptInput>(
      [&] {
        run("\x80\x02X\xff\x00\x00\x00"
            "ab."s);
      },
      {"runs past the end"});
  expect_error<CorruptInput>([&] { run("\x80\x02K\x01"); }, {"without STOP"});
  expect_error<Unsupported>(
      [&] {
        run("\x80\x02"
            "cos\nsystem\n.");
      },
      {"os.system"});
  expect_error<CorruptInput>([&] { run("\x80\x02K\x01K\x02s."); }, {"stack underflow"});
}

}  // namespace
}  // namespace libai::checkpoint
