// What node 0's scheduler (actors/cluster_scheduler.cc) and every other node's agent
// (actors/cluster_agent.cc) share: one node's run state (its actor system, data plane, layout and
// stage actors), opening the data plane while watching the control plane, and small helpers.
// Internal to run_cluster (actors/cluster.h); nothing outside actors/cluster_*.cc includes it.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/cluster.h"
#include "runtime/comm/ucx_communicator.h"

namespace libai::actors::cluster {

using Clock = std::chrono::steady_clock;

// The signal that interrupted this process's cluster run (0: none).
int interrupted_signal();

std::string hostname();
// "stage 1, stage 2" held by `node`.
std::string stages_of_node(const PipelineLayout& layout, int node);
std::string seconds_text(std::chrono::milliseconds ms);

// Everything of one node's run that outlives a phase.
struct Node {
  const ClusterSpec& spec;
  ClusterJob& job;
  const ClusterOptions& options;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<caf::scoped_actor> self;
  std::shared_ptr<comm::Communicator> data_plane;
  PipelineLayout layout;
  bool have_layout = false;
  std::vector<caf::actor> stages;  // this node's (null for other nodes' slots)
  caf::actor driver;               // node 0
  std::optional<TrainPrograms> training;  // a training job's programs

  Node(const ClusterSpec& s, ClusterJob& j, const ClusterOptions& o);

  caf::scoped_actor& me() { return *self; }
  std::string who() const { return str_cat("node ", spec.node_rank); }
  std::string stages_of(int node) const {
    return have_layout ? stages_of_node(layout, node) : "stages not yet assigned";
  }

  void stop_local_stages();
  // This node's stage actors, forward or training ones.
  std::vector<caf::actor> spawn_stages(const wire::Assignment& assignment, int rank);
  void connect_stages(int rank, const std::vector<caf::actor>& handles, const caf::actor& to_driver);
  void check_interrupt();
};

// Opens the UCX data plane on a thread of its own while the caller keeps watching the
// control plane: `watch` receives control messages for a moment and throws when a node died
// or the job was aborted, so that a node lost while the data plane forms ends the job at
// once instead of at the data plane's timeout. The thread is detached: after such a failure
// it still waits in the rendezvous until its own timeout, owning only its shared state.
std::shared_ptr<comm::Communicator> open_data_plane(comm::UcxGroupOptions options,
                                                    const std::function<void()>& watch,
                                                    const std::function<void(int)>& on_port = {});

ClusterResult run_node0(Node& node);  // actors/cluster_scheduler.cc
ClusterResult run_agent(Node& node);  // actors/cluster_agent.cc

}  // namespace libai::actors::cluster
