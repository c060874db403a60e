#include "schedule/zero_memory.h"

#include <algorithm>
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
ZeroMemory zero_state_bytes(int stage, int dp, double params, double largest_layer, double rest) {
  LIBAI_CHECK(stage >= 0 && stage <= 3, "ZeRO stage is ", stage, "; expected 0, 1, 2 or 3");
  LIBAI_CHECK(dp >= 1, "ZeRO over a data-parallel size of ", dp, "; expected at least 1");
  LIBAI_CHECK(std::isfinite(params) && params >= 0, "ZeRO memory of ", params,
              " parameters; expected a finite count >= 0");
  LIBAI_CHECK(std::isfinite(largest_layer) && largest_layer >= 0 && std::isfinite(rest) &&
                  rest >= 0,
              "ZeRO memory with units of ", largest_layer, " and ", rest,
              " elements; expected finite counts >= 0");
  const double n = dp, u = largest_layer, r = rest;
  ZeroMemory m;
  m.parameters = stage == 3 ? 4 * params / n : 4 * params;
  m.gradients = stage == 0 ? 4 * params : stage == 1 ? 4 * params + 4 * params / n : 4 * params / n;
  m.optimizer = stage == 0 ? 8 * params : 8 * params / n;
  switch (stage) {
    case 0: m.in_flight = dp > 1 ? 4 * params : 0.0; break;
    case 1: m.in_flight = 4 * std::max(u, r); break;
    case 2: m.in_flight = std::max(4 * r + 8 * u, 8 * r); break;
    default: m.in_flight = std::max(8 * r + 12 * u, 12 * r); break;
  }
  return m;
}

std::string zero_description(int stage, int dp) {
  return stage == 0 ? std::string("no ZeRO") : str_cat("ZeRO-", stage, " over dp ", dp);
}

}  // namespace libai::schedule
