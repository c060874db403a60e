#include "schedule/zero_memory.h"

#include <cmath>

#include "runtime/error.h"

namespace libai::schedule {

ZeroMemory& ZeroMemory::operator+=(const ZeroMemory& other) {
  parameters += other.parameters;
  gradients += other.gradients;
  optimizer += other.optimizer;
  in_flight += other.in_flight;
  return *this;
}

// Note [ZeRO memory model] in the header.
ZeroMemory zero_state_bytes(int stage, int dp, double params, double largest_unit) {
  LIBAI_CHECK(stage >= 0 && stage <= 3, "ZeRO stage is ", stage, "; expected 0, 1, 2 or 3");
  LIBAI_CHECK(dp >= 1, "ZeRO over a data-parallel size of ", dp, "; expected at least 1");
  LIBAI_CHECK(std::isfinite(params) && params >= 0, "ZeRO memory of ", params,
              " parameters; expected a finite count >= 0");
  LIBAI_CHECK(std::isfinite(largest_unit) && largest_unit >= 0,
              "ZeRO memory with a largest unit of ", largest_unit,
              " elements; expected a finite count >= 0");
  const double n = dp;
  ZeroMemory m;
  m.parameters = stage == 3 ? 4 * params / n : 4 * params;
  m.gradients = stage == 0 ? 4 * params : stage == 1 ? 4 * params + 4 * params / n : 4 * params / n;
  m.optimizer = stage == 0 ? 8 * params : 8 * params / n;
  m.in_flight = stage == 2 ? 4 * largest_unit : stage == 3 ? 8 * largest_unit : 0.0;
  return m;
}

std::string zero_description(int stage, int dp) {
  return stage == 0 ? std::string("no ZeRO") : str_cat("ZeRO-", stage, " over dp ", dp);
}

}  // namespace libai::schedule
