// Fuzz target: the credit protocol (actors/credits.h) driven by fuzzed event sequences: a
// producer that fires when it has a credit, a consumer that frees slots of what it received,
// and credit messages with any slot count (a corrupt or hostile peer). A separate count of the
// packets in flight is the reference. Contract: credits never negative, never more in flight
// than the quota, a bad credit is CorruptInput and changes nothing, and once the consumer has
// freed everything the producer has its whole quota back.
#include <cstring>

#include "actors/credits.h"
#include "tests/fuzz/fuzz_harness.h"

namespace {

using libai::actors::Credits;

void expect(bool ok) {
  if (!ok) __builtin_trap();
}

void run_events(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const int quota = data[0] % 17;  // the consumer's input slots (0: a link that never sends)
  Credits credits(quota);
  int in_flight = 0;  // the reference: packets sent and not yet freed by the consumer
  for (size_t i = 1; i < size; ++i) {
    const uint8_t event = data[i];
    switch (event % 4) {
      case 0:  // the producer's next action wants to send
      case 1:
        if (credits.available() > 0) {
          credits.take();
          ++in_flight;
        }
        break;
      case 2: {  // the consumer frees some of what it holds (a batch of credits in one message)
        const int slots = in_flight == 0 ? 0 : 1 + (event >> 2) % in_flight;
        if (slots == 0) break;
        credits.give_back(std::uint32_t(slots));
        in_flight -= slots;
        break;
      }
      case 3: {  // a credit message with any slot count
        std::uint32_t slots = event >> 2;
        if (i + 4 < size) {
          std::memcpy(&slots, data + i + 1, 4);
          i += 4;
        }
        const Credits before = credits;
        const bool valid = slots > 0 && slots <= std::uint32_t(in_flight);
        try {
          credits.give_back(slots, "the fuzzer");
          expect(valid);
          in_flight -= int(slots);
        } catch (const libai::CorruptInput&) {
          expect(!valid);
          expect(credits.available() == before.available());
        }
        break;
      }
    }
    expect(credits.available() >= 0 && credits.available() <= quota);
    expect(credits.in_flight() == in_flight && in_flight <= quota);
  }
  // Every credit matched: freeing what is left gives the whole quota back.
  if (in_flight > 0) credits.give_back(std::uint32_t(in_flight));
  expect(credits.available() == quota);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Valid events never throw: any libai::Error here is a finding, not an outcome.
  try {
    run_events(data, size);
  } catch (const libai::Error&) {
    __builtin_trap();
  }
  return 0;
}
