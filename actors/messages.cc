#include "actors/messages.h"

#include <caf/io/all.hpp>

namespace libai::actors {

void configure_actor_system(caf::actor_system_config& config, int threads) {
  config.load<caf::io::middleman>();
  config.add_message_type<wire::Bytes>("libai::wire::Bytes");
  config.set("scheduler.max-threads", threads);
}

}  // namespace libai::actors
