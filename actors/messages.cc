#include "actors/messages.h"

#include <caf/io/all.hpp>

namespace libai::actors {

void configure_actor_system(caf::actor_system_config& config, int threads) {
  config.load<caf::io::middleman>();
  config.add_message_type<wire::Bytes>("libai::wire::Bytes");
  config.set("scheduler.max-threads", threads);
  // CAF 0.17's idle workers poll their queues every 50 us ("moderate" polling) before they
  // wait on a condition variable, and an enqueue from a thread outside CAF (a stage's pinned
  // thread) does not wake them: skipping that phase cuts a hop between actors from ~60 us to
  // ~20 us on a 2-core VM (bench/RESULTS.md, runtime overhead).
  config.set("work-stealing.moderate-poll-attempts", 0);
}

}  // namespace libai::actors
