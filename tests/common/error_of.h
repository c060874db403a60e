// The message of the libai::Error `f` throws, or "" when it throws none: for tests that check
// what an error names.
#pragma once

#include <functional>
#include <string>

#include "runtime/error.h"

namespace libai::testing {

inline std::string error_message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace libai::testing
