// The driver: where a job's work enters the pipelines and its results leave them. Jobs run on
// their own threads and talk to it through a PipelineClient (thread-safe, no CAF in sight);
// the driver actor feeds every tensor-parallel rank of each replica's first stage within the
// credits that stage grants, and hands the last stage's outputs back to the waiting job.
//
//   auto client = std::make_shared<PipelineClient>();
//   caf::actor driver = spawn_driver(system, DriverSetup{.client = client, .replicas = ...});
//   client->submit(/*replica=*/0, packet);          // any thread
//   Packet logits = client->wait(/*group=*/3);     // blocks until group 3's output arrives
#pragma once

#include <caf/all.hpp>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "actors/stage_actor.h"

namespace libai::actors {

class PipelineClient {
 public:
  // Sends `packet` into replica `replica` (to each tensor-parallel rank of its first stage).
  void submit(int replica, Packet packet);
  // The next output of `group` (outputs of one group arrive in step order). Throws
  // CommunicationError with the job's failure when the job failed first or meanwhile.
  Packet wait(int group);
  // Ends the job with `reason`: every wait() and later submit() throws it.
  void fail(const std::string& reason);
  bool failed() const;
  std::string failure() const;  // empty while the job runs

  // For the driver actor.
  void attach(caf::actor driver);
  void deliver(Packet packet);

 private:
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  caf::actor driver_;
  std::map<int, std::deque<Packet>> outputs_;
  std::string failure_;
};

struct ReplicaRoutes {
  std::vector<Route> first_stage;  // one per tensor-parallel rank
  Route last_stage;                // the rank whose outputs come back (tp rank 0)
  int first_stage_slots = 1;       // the first stage's input quota
};

struct DriverSetup {
  int node = 0;
  std::shared_ptr<PipelineClient> client;
  // Packets and credits to other nodes (actors/packet_inbox.h); null in one process. Packets
  // from other nodes' last stages and credits from their first stages come through this
  // node's inbox (add_driver_channels in actors/pipeline.h).
  std::shared_ptr<comm::MessagePlane> plane;
};

// The driver starts without routes; (routes_atom, DriverRoutesPtr) gives them.
using DriverRoutesPtr = std::shared_ptr<const std::vector<ReplicaRoutes>>;
caf::actor spawn_driver(caf::actor_system& system, DriverSetup setup);

}  // namespace libai::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(libai::actors::DriverRoutesPtr)
