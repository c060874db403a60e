// A producer's credits toward one consumer (credit-based flow control, actors/stage_actor.h and
// Note [Training credits] in actors/train_stage_actor.h), without CAF so that a fuzzer
// (tests/fuzz/fuzz_credits.cc) drives it alone.
//
//   Credits credits(routes->downstream_slots);  // the consumer's input quota
//   if (credits.available() == 0) wait(...);     // an action that sends needs one
//   credits.take();                              // when the action fires
//   credits.give_back(slots);                    // a credit message from the consumer
//
// The consumer's input quota bounds its memory only if the producer never has more packets in
// flight than the quota. So a credit for more slots than are in flight (a consumer returning a
// slot twice, a corrupt or hostile credit message) is an error, never a larger window; so is a
// take without a credit. Counts stay within [0, quota] and cannot overflow.
#pragma once

#include <cstdint>

#include "runtime/error.h"

namespace libai::actors {

class Credits {
 public:
  Credits() = default;  // a quota of 0: no credits until set
  explicit Credits(int quota) : quota_(quota), available_(quota) {
    LIBAI_CHECK(quota >= 0, "a credit quota of ", quota);
  }

  int quota() const { return quota_; }
  int available() const { return available_; }
  int in_flight() const { return quota_ - available_; }

  // One packet sent: takes a credit. Calling it with none available is our bug.
  void take() {
    LIBAI_ASSERT(available_ > 0, "a credit taken with none available (quota ", quota_, ")");
    --available_;
  }

  // The consumer freed `slots` input slots. Throws CorruptInput for zero slots or more than
  // are in flight (the message names `what`, e.g. the link).
  void give_back(std::uint32_t slots, const std::string& what = "the consumer") {
    LIBAI_CHECK_KIND(CorruptInput, slots > 0, "a credit of zero slots from ", what);
    LIBAI_CHECK_KIND(CorruptInput, slots <= std::uint32_t(in_flight()), "a credit of ", slots,
                     " slot(s) from ", what, " with only ", in_flight(),
                     " packet(s) in flight (quota ", quota_, ")");
    available_ += int(slots);
  }

 private:
  int quota_ = 0;
  int available_ = 0;
};

}  // namespace libai::actors
