// The message of the InvalidArgument `f` throws, or "no error": for tests that check what an
// error names.
#pragma once

#include <functional>
#include <string>

#include "runtime/error.h"

namespace libai::schedule::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace libai::schedule::testing
