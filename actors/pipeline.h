// Pipelines of stage actors: the layout of a job's slots (data-parallel replica x pipeline
// stage x tensor-parallel rank, each on a node and a device), the routes between them, and a
// whole pipeline in one process (LocalPipeline) for embedding and for tests. The cluster
// (actors/cluster/cluster.h) builds the same layout across node processes.
//
//   PipelineLayout layout = make_layout({.dp = 1, .pp = 4, .tp = 1}, /*groups=*/8);
//   LocalPipeline pipeline(system, layout, [&](const SlotSpec& slot) { return compute_of(slot); });
//   pipeline.client().submit(0, packet);  ...  pipeline.client().wait(group);
//   std::vector<wire::StageReport> reports = pipeline.wait();   // after every group is done
//
// Routes: replica r's stage s, rank t receives from (r, s-1, t) and sends to (r, s+1, t);
// stage 0's ranks receive from the driver, and the last stage's rank 0 sends its outputs to
// the driver (the other ranks hold the same outputs and drop them). With tensor parallelism
// every rank of a stage gets the same full activations.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <future>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/driver.h"
#include "actors/packet_inbox.h"
#include "actors/stage_actor.h"

namespace libai::actors {

struct SlotSpec {
  int replica = 0, stage = 0, rank = 0;
  int node = 0;
  Device device = Device::cpu();
  double slowdown = 1.0;
  std::string name() const;  // "stage 1 (dp 0, tp 1)" or "stage 1" when alone
  bool alone = true;         // dp == tp == 1: name it by stage only
};

struct LayoutSizes {
  int dp = 1, pp = 1, tp = 1;
};

struct PipelineLayout {
  LayoutSizes sizes;
  std::vector<SlotSpec> slots;             // index: (replica * pp + stage) * tp + rank
  std::vector<std::vector<int>> groups;    // per replica: its groups, in program order
  std::vector<int> input_slots;            // per stage: input quota (stage 0: the groups)
  bool by_arrival = false;                 // stages take inputs as they come (serving: Note
                                           // [Stage programs] in actors/stage_actor.h)
  int index(int replica, int stage, int rank) const {
    return (replica * sizes.pp + stage) * sizes.tp + rank;
  }
  const SlotSpec& slot(int replica, int stage, int rank) const {
    return slots[size_t(index(replica, stage, rank))];
  }
  int replica_of_group(int group) const;
};

// All slots on node 0, cpu:0, groups dealt round-robin to the replicas; input quotas from
// schedule::buffer_quota (2 slots after stage 0: double buffering) plus one for the action a
// stage queues on its thread, and one slot per group at stage 0. Callers then set nodes,
// devices and slow-downs.
PipelineLayout make_layout(LayoutSizes sizes, int num_groups);

// The channel ids of links: into slot i, and from replica r's last stage to the driver.
std::uint32_t channel_into_slot(int slot);
std::uint32_t channel_to_driver(int replica);

using ComputeFactory = std::function<std::shared_ptr<StageCompute>(const SlotSpec&)>;
using TraceFn = std::function<void(const SlotSpec&, const std::string&)>;

// Spawns the stage actors of `node`'s slots; returns a handle per slot (null for other nodes').
// With a message plane (a job over several nodes) each stage gets it, and the node's inbox
// learns the channels of the stage's input link (packets) and output link (credits).
// `progress`: where the stages show what they do, for the cluster's watchdog (null: nowhere).
std::vector<caf::actor> spawn_slots(caf::actor_system& system, const PipelineLayout& layout,
                                    int node, const ComputeFactory& make_compute,
                                    const NodePlane& plane, caf::actor parent,
                                    const TraceFn& trace = {}, ProgressBoard* progress = nullptr);

// Node 0 of a job over several nodes: the inbox learns the driver's channels (every last
// stage's outputs, every first stage's credits). Call it when the driver is spawned.
void add_driver_channels(const PipelineLayout& layout, PacketInbox& inbox, const caf::actor& driver);

// Gives `node`'s stage actors (and, on node 0, the driver) their routes, once every slot's
// handle is known (`handles`: all slots, in layout order).
void connect_slots(const PipelineLayout& layout, int node, const std::vector<caf::actor>& handles,
                   const caf::actor& driver);

// A whole pipeline in this process.
class LocalPipeline {
 public:
  LocalPipeline(caf::actor_system& system, PipelineLayout layout, const ComputeFactory& make_compute,
                const TraceFn& trace = {});
  ~LocalPipeline();
  PipelineClient& client() { return *client_; }
  std::shared_ptr<PipelineClient> client_ptr() { return client_; }
  // Waits until every stage ran its program; throws the first stage's error (after stopping
  // the others) or a CommunicationError after `timeout`.
  std::vector<wire::StageReport> wait(std::chrono::milliseconds timeout = std::chrono::minutes(10));

  struct Outcome;  // shared with the supervisor actor (pipeline.cc)

 private:
  void stop_all();
  caf::actor_system& system_;
  PipelineLayout layout_;
  std::shared_ptr<PipelineClient> client_;
  std::shared_ptr<Outcome> outcome_;
  caf::actor supervisor_;
  caf::actor driver_;
  std::vector<caf::actor> stages_;
  bool waited_ = false;
};

}  // namespace libai::actors
