// What node 0's scheduler (actors/cluster/cluster_scheduler.cc) and every other node's agent
// (actors/cluster/cluster_agent.cc) share: one node's run state (its actor system, data plane, layout and
// stage actors), opening the data plane while watching the control plane, and small helpers.
// Internal to run_cluster (actors/cluster/cluster.h); nothing outside actors/cluster_*.cc includes it.
//
// Note [Liveness]
// A dead node is seen at once (its connections close: CAF's down_msg, UCX's endpoint errors). A
// hung one is not: a stopped process (SIGSTOP, a stuck driver, a swapping host) keeps its
// sockets open and its peers would wait forever. So, once the job runs (after the routes; the
// set-up phases before are bounded by the join and setup timeouts), node 0 sends a heartbeat to
// every node several times per train.cluster.heartbeat_timeout, from its control loop, and
// every node answers from its own with what each of its stages is doing (StageProgress: the
// piece of work on its pinned thread and since when, what its next action waits for, the
// actions done). Node 0 ends the job (one error, sent to every node) when
// - a node has not answered for the timeout: "node 2 (stage 2) stopped answering for 3.1 s
//   (...); last seen: stage 2 computing g5s0 for 0.2 s, 14 action(s) done", or
// - a stage's thread has been on one piece of work for the timeout: "stage 1 on node 1 made
//   no progress for 3.2 s (...): receiving g5s0 from stage 0; 12 action(s) done". A piece of
//   work exists only once the action fired, i.e. its inputs and its credit were there.
// Every other node ends when node 0 has not sent a heartbeat for the timeout.
// Progress is a piece of work ending: taking an input's bytes off the data plane, computing an
// action, a step's end, a checkpoint or evaluation control, the last sends. A stage that waits
// for its input or a credit is not hung itself (whoever should send it is, and is named
// there); a slow stage whose actions keep ending is never hung, however slow. The timeout must
// therefore exceed the longest single action, control or step end (a checkpoint of a large
// model, an action 20x slowed) and the longest pause of a healthy process. A process that was
// away itself (its control loop did not run for half the timeout) restarts its peers' clocks
// instead of blaming them (StallGuard).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/cluster/cluster.h"
#include "actors/packet_inbox.h"
#include "actors/stage_progress.h"
#include "runtime/comm/ucx_communicator.h"
#include "runtime/host_identity.h"

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
  std::shared_ptr<comm::Communicator> data_plane;  // collectives between the nodes
  NodePlane plane;  // packets and credits between the nodes (actors/packet_inbox.h)
  PipelineLayout layout;
  bool have_layout = false;
  std::vector<caf::actor> stages;  // this node's (null for other nodes' slots)
  bool data_planes_aborted = false;
  caf::actor driver;                      // node 0
  std::optional<TrainPrograms> training;  // a training job's programs
  ProgressBoard progress;  // this node's stages, for the heartbeats (Note [Liveness])

  Node(const ClusterSpec& s, ClusterJob& j, const ClusterOptions& o);

  caf::scoped_actor& me() { return *self; }
  std::string who() const { return str_cat("node ", spec.node_rank); }
  std::string stages_of(int node) const {
    return have_layout ? stages_of_node(layout, node) : "stages not yet assigned";
  }

  // Note [Aborting the data planes]
  // A thread blocked on the data plane (a stage's receive from a hung peer, a collective)
  // waits until the plane's own deadline, and a stage actor's abort joins its thread. So a
  // failing node first breaks its data planes, which wakes every blocked call with the reason,
  // and then stops its stages: the message plane, then the communicator, once, on the first
  // failure, from the control loop's thread (whichever of them exists by then).
  void abort_data_planes(const std::string& reason);
  // Keeps the communicator between the nodes and starts the message plane over it (its failures
  // reach this node's control loop as a stage's would). Every node calls it once its data plane
  // formed, before it spawns its stages.
  void set_data_plane(std::shared_ptr<comm::Communicator> communicator);
  // Breaks the data planes (with `reason`), then ends this node's stages and driver.
  void stop_local_stages(const std::string& reason = "job aborted");
  // This node's stage actors, forward or training ones.
  std::vector<caf::actor> spawn_stages(const wire::Assignment& assignment, int rank);
  void connect_stages(int rank, const std::vector<caf::actor>& handles,
                      const caf::actor& to_driver);
  void check_interrupt();
};

// Note [The control plane's bandwidth]
// As it joins, each node sends node 0 a 1 MiB message over the control plane and times the
// echo (the best of 3); the round trip's excess over an empty one is 2 MiB over the link. Node
// 0 puts the slowest node's figure in the assignment (inter_node_bandwidth_gbs), which the
// auto-parallel search prices the link between nodes with when graph.auto_parallel.inter_node
// leaves it unset. It is the control plane's TCP path, serialisation included: a lower bound
// for the data plane's UCX (or shared memory on one host), measured before that plane exists
// (the plan must be made first). Node 0 echoes no message larger than the probe's.
// Note [Choosing the transport]
// Nodes that share one host's memory (the same kernel, IPC and PID namespaces: their
// host_identity() keys are equal) exchange data through shared memory (the shm communicator
// and message plane, runtime/comm/shm_*.h): at memcpy speeds, with a dead peer seen by its pid
// and a hung one by the heartbeats (Note [Liveness]). Any other cluster uses UCX for every
// pair (TCP here, verbs where there are), with its own peer-failure handling. Node 0 chooses
// from train.cluster.transport and the keys the nodes joined with, and names the choice in the
// assignment; "shm" on nodes that cannot share memory is an error naming them.
std::string choose_transport(const std::string& wanted, const std::vector<std::string>& host_keys);

// Opens the data plane (`transport`: "shm" or "ucx") on a thread of its own while the caller
// keeps watching the control plane: `watch` receives control messages for a moment and throws
// when a node died or the job was aborted, so that a node lost while the data plane forms ends
// the job at once instead of at the data plane's timeout. The thread is detached: after such a
// failure it still waits in the rendezvous until its own timeout, owning only its shared state.
std::shared_ptr<comm::Communicator> open_data_plane(const std::string& transport,
                                                    comm::UcxGroupOptions options,
                                                    const std::function<void()>& watch,
                                                    const std::function<void(int)>& on_port = {});

ClusterResult run_node0(Node& node);  // actors/cluster/cluster_scheduler.cc
ClusterResult run_agent(Node& node);  // actors/cluster/cluster_agent.cc

}  // namespace libai::actors::cluster
