// Fuzz target: load_tokenizer on the bytes as a tokenizer.json, or as a SentencePiece
// spiece.model when they do not start like JSON (the loader reads files, so they go to a
// per-process temp folder), then encode / decode / look up fixed inputs with whatever it accepts.
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "models/tokenizers/tokenizer.h"
#include "tests/fuzz/fuzz_harness.h"

namespace {

namespace fs = std::filesystem;

const fs::path& work_folder() {
  static const fs::path folder = [] {
    std::string pattern = (fs::temp_directory_path() / "libai_fuzz_tokenizer_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    return fs::path(pattern);
  }();
  return folder;
}

void load_and_use(const uint8_t* data, size_t size) {
  using namespace libai::tokenizers;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  const bool json = first != std::string_view::npos && bytes[first] == '{';
  // A folder with tokenizer.json, or the .model file itself (a tokenizer.json would win).
  const fs::path file = work_folder() / (json ? "tokenizer.json" : "spiece.model");
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  const auto tok = load_tokenizer(json ? work_folder() : file);
  static const std::vector<std::string> kTexts = {
      "Hello, world!",
      "  leading and trailing  ",
      "你好世界 東京 안녕",
      "emoji 😀👨‍👩‍👧 é e\u0301",
      "",
      "a\tb\nc\r\n\x01\x7f",
      "\xff\xfe bad utf-8 \xc3",
      "<s> x </s> [CLS] [SEP] <pad> <unk> [MASK] <mask>"};
  for (const std::string& text : kTexts) {
    for (bool add_special : {true, false}) {
      const Encoding e = tok->encode(text, add_special);
      (void)tok->decode(e.ids, false);
      (void)tok->decode(e.ids, true);
    }
  }
  EncodeOptions options;
  options.padding = Padding::longest;
  options.truncation = true;
  options.max_length = 16;
  options.padding_side = Side::left;
  try {
    (void)tok->encode_batch(kTexts, options);
  } catch (const libai::InvalidArgument&) {  // max_length below the special tokens' count
  }
  (void)tok->decode({-1, 0, 1, 2, 100, 1000, INT_MAX, INT_MIN}, false);
  for (int32_t id : {-1, 0, 1, 2, 3, 50000}) (void)tok->id_to_token(id);
  for (const char* token : {"", "a", "[UNK]", "<unk>", "</s>"}) (void)tok->token_to_id(token);
  (void)tok->vocab_size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  libai::fuzz::run_one(data, size, load_and_use);
  return 0;
}
