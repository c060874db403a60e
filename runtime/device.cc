#include "runtime/device.h"

#include <charconv>

#include "runtime/error.h"

namespace libai {

Device Device::parse(std::string_view text) {
  auto colon = text.find(':');
  std::string_view kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    std::string_view digits = text.substr(colon + 1);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    LIBAI_CHECK(ec == std::errc() && ptr == digits.data() + digits.size() && index >= 0,
                "bad device '", text, "': the index must be a non-negative integer");
  }
  if (kind == "cpu") return cpu(index);
  if (kind == "cuda" || kind == "gpu") return cuda(index);
  LIBAI_THROW(InvalidArgument, "bad device '", text, "' (expected cpu[:N] or cuda[:N])");
}

std::string Device::str() const {
  return std::string(is_cpu() ? "cpu:" : "cuda:") + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.str(); }

}  // namespace libai
