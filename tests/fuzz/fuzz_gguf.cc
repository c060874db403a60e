// Fuzz target: GgufFile::open_bytes, every metadata getter and tensor it accepts (dequantised
// when small), and the tokenizer its metadata describes, then an encode and a decode.
#include "models/tokenizers/pipeline.h"
#include "runtime/checkpoint/gguf.h"
#include "tests/fuzz/fuzz_harness.h"

namespace {

void load_gguf(const uint8_t* data, size_t size) {
  using namespace libai;
  auto file = checkpoint::GgufFile::open_bytes(data, size, "fuzz.gguf");
  for (const auto& key : file.keys()) {
    const auto* v = file.find(key);
    try {
      if (v->type == checkpoint::GgufValueType::string) (void)file.get_string(key);
      else if (v->type == checkpoint::GgufValueType::array) (void)file.get_reals(key);
      else (void)file.get_real(key, 0);
    } catch (const Error&) {
    }
  }
  for (const auto& name : file.names()) {
    const auto& info = file.info(name);
    int64_t n = 1;
    for (int64_t d : info.shape) n *= d;
    if (n > fuzz::kMaxElementsRead) continue;
    try {
      fuzz::touch(file.tensor(name));
      fuzz::touch(file.tensor_f32(name));
    } catch (const Error&) {
    }
  }
  if (!file.find("tokenizer.ggml.tokens")) return;
  auto tok = tokenizers::gguf_tokenizer(file);
  const auto ids = tok->encode("Hello world, 123 caf\xc3\xa9 <s>").ids;
  (void)tok->decode(ids, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  libai::fuzz::run_one(data, size, load_gguf);
  return 0;
}
