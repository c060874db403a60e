// Fuzz target: TorchCheckpoint::open_bytes (zip reader + restricted unpickler) and every tensor
// it accepts.
#include "runtime/checkpoint/torch_zip.h"
#include "tests/fuzz/fuzz_harness.h"

namespace {

void load_torch(const uint8_t* data, size_t size) {
  using namespace libai;
  auto checkpoint = checkpoint::TorchCheckpoint::open_bytes(data, size, "fuzz.bin");
  (void)checkpoint.other_values();
  for (const auto& name : checkpoint.names()) fuzz::touch(checkpoint.tensor(name));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  libai::fuzz::run_one(data, size, load_torch);
  return 0;
}
