// Fuzz target: SafetensorsFile::open_bytes and every accessor on whatever it accepts.
#include "runtime/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_harness.h"

namespace {

void load_safetensors(const uint8_t* data, size_t size) {
  using namespace libai;
  auto file = checkpoint::SafetensorsFile::open_bytes(data, size, "fuzz.safetensors");
  (void)file.metadata();
  for (const auto& name : file.names()) {
    const auto& info = file.info(name);
    fuzz::touch(file.tensor(name));
    if (!info.shape.empty() && info.shape[0] > 0) {
      fuzz::touch(file.slice(name, 0, info.shape[0] / 2, (info.shape[0] + 1) / 2));
      const int64_t last = info.shape.back();
      fuzz::touch(file.slice(name, -1, last > 1 ? 1 : 0, last > 1 ? last - 1 : last));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  libai::fuzz::run_one(data, size, load_safetensors);
  return 0;
}
