// Credits (actors/credits.h): a producer never has more packets in flight than the consumer's
// quota, whatever credit messages arrive; a bad credit is a CorruptInput naming the link and
// changes nothing.
#include "actors/credits.h"

#include <gtest/gtest.h>

#include <limits>

namespace libai::actors {
namespace {

TEST(Credits, StartWithTheQuotaAndComeBackInAnyBatches) {
  Credits credits(3);
  EXPECT_EQ(credits.available(), 3);
  credits.take();
  credits.take();
  credits.take();
  EXPECT_EQ(credits.available(), 0);
  EXPECT_EQ(credits.in_flight(), 3);
  credits.give_back(2);
  EXPECT_EQ(credits.available(), 2);
  credits.give_back(1);
  EXPECT_EQ(credits.available(), 3);
  EXPECT_EQ(credits.in_flight(), 0);
}

std::string refusal(Credits& credits, std::uint32_t slots) {
  const int before = credits.available();
  try {
    credits.give_back(slots, "stage 2 on link 7");
  } catch (const CorruptInput& e) {
    EXPECT_EQ(credits.available(), before);
    return e.what();
  }
  return "accepted";
}

// Before, the stage added int(slots) to its count: a credit of 2^31 slots made it negative (and
// two of 2^30 overflowed an int), a duplicate credit widened the window past the quota.
TEST(Credits, MoreSlotsThanInFlightAreRefused) {
  Credits credits(4);
  credits.take();
  EXPECT_EQ(
      refusal(credits, 2),
      "a credit of 2 slot(s) from stage 2 on link 7 with only 1 packet(s) in flight (quota 4)");
  EXPECT_NE(refusal(credits, std::numeric_limits<std::uint32_t>::max()).find("with only 1"),
            std::string::npos);
  EXPECT_NE(refusal(credits, 1u << 31).find("with only 1"), std::string::npos);
  EXPECT_EQ(refusal(credits, 0), "a credit of zero slots from stage 2 on link 7");
  credits.give_back(1);
  EXPECT_NE(refusal(credits, 1).find("with only 0"), std::string::npos);
  EXPECT_EQ(credits.available(), 4);
}

TEST(Credits, TakingWithoutACreditIsOurBug) {
  Credits none(0);
  EXPECT_THROW(none.take(), InternalError);
  EXPECT_THROW(Credits(-1), InvalidArgument);
}

}  // namespace
}  // namespace libai::actors
