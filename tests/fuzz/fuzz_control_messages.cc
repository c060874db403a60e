// Fuzz target: every decoder the cluster applies to control messages it receives
// (actors/wire/wire.h), on arbitrary bytes. The first byte picks the message type, the rest is
// the message. Contract: CorruptInput or a value; a decoded value encodes to bytes that decode
// to the same bytes again (no field is read one way and written another); the reader stays
// within its traversal limit (libFuzzer's -malloc_limit_mb catches an amplified allocation).
#include <cstring>

#include "actors/wire/wire.h"
#include "tests/fuzz/fuzz_harness.h"

namespace {

using namespace libai::wire;

template <typename T>
void decode_as(std::span<const std::uint8_t> bytes) {
  const T value = decode<T>(bytes);
  const Bytes once = encode(value);
  const Bytes twice = encode(decode<T>(once));
  if (once != twice) __builtin_trap();  // a value that does not survive its own encoding
}

void decode_any(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::span<const std::uint8_t> bytes(data + 1, size - 1);
  switch (data[0] % 12) {
    case 0: decode_as<JoinRequest>(bytes); break;
    case 1: decode_as<JoinReply>(bytes); break;
    case 2: decode_as<TensorHeader>(bytes); break;
    case 3: decode_as<DeviceProfile>(bytes); break;
    case 4: decode_as<PacketHeader>(bytes); break;
    case 5: decode_as<Credit>(bytes); break;
    case 6: decode_as<Abort>(bytes); break;
    case 7: decode_as<Assignment>(bytes); break;
    case 8: decode_as<StageReport>(bytes); break;
    case 9: decode_as<StepSummary>(bytes); break;
    case 10: decode_as<TrainControl>(bytes); break;
    case 11: decode_as<Heartbeat>(bytes); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  libai::fuzz::run_one(data, size, decode_any);
  return 0;
}
