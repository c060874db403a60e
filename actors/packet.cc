#include "actors/packet.h"

#include "runtime/error.h"

namespace libai::actors {

std::string describe(const Packet& packet) {
  if (packet.gradient || packet.chunk != 0)
    return str_cat(packet.gradient ? "gradient" : "activation", " of micro-batch ", packet.group,
                   " step ", packet.step, " chunk ", packet.chunk);
  return str_cat("group ", packet.group, " step ", packet.step, packet.done ? " (done)" : "");
}

}  // namespace libai::actors
