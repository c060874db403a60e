// How much longer a test waits under a sanitizer: processes start, profile their devices and
// copy memory several times slower there, and a test's processes share the cores with the
// test ctest runs beside it. Only the tests' own waits are scaled; a timeout a test checks
// (a config's, a communicator's) is not.
#pragma once

#include "runtime/sanitizers.h"

namespace libai::testing {

inline constexpr int kTimeScale = kSanitizedBuild ? 4 : 1;

}  // namespace libai::testing
