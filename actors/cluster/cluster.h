// A cluster of node processes running one pipeline job: node 0 hosts the scheduler, every node
// an agent; the agents join, report their devices, receive the plan, build their stage actors,
// and the scheduler drives the job and reports what each stage did.
//
//   ClusterSpec spec = resolve_cluster(flags, &cfg);    // runtime/cluster_env.h
//   MyJob job(cfg);                                       // a ClusterJob: plan, layout, compute
//   ClusterResult result = run_cluster(spec, job, {});    // on every node; throws on failure
//
// Protocol (control messages cross processes as Cap'n Proto bytes, actors/wire/control.capnp):
//   1. node 0 publishes its scheduler actor on ADDR:PORT; node k retries remote_actor until the
//      join timeout, then sends (join, JoinRequest{rank, token, hostname, device profiles}).
//      A wrong or missing token, a rank out of range or taken twice is refused with a reason
//      (JoinReply) and logged on node 0; the refused node exits with that reason.
//   2. once every node joined, node 0 plans (ClusterJob::plan: the split and the devices, from
//      the measured profiles), opens the UCX data plane and sends (assign, Assignment) to all.
//   3. every node joins the data plane, spawns its stage actors and answers (ready, handles);
//      node 0 sends every node all handles (routes) and the stages start.
//   4. node 0 drives the job (ClusterJob::drive, or ClusterJob::train for a training job whose
//      stages step when node 0's train driver tells them, on its own thread). Each stage reports
//      (finished, StageReport) to its node's agent, which forwards it; when all stages are
//      done node 0 sends (stop) and every node ends.
// Failures: node 0 monitors every agent and every agent node 0. A node that dies ends the job
// on every node with an error naming it and the stages it held; while the job runs, a node
// that stops answering heartbeats, or a stage that makes no progress, for the heartbeat
// timeout ends it naming the node, its stages and what they were doing or waiting for
// (Note [Liveness] in actors/cluster/cluster_node.h); a stage error ends it naming the stage; a node that never joins ends it at the join timeout naming the missing nodes;
// Ctrl-C (SIGINT/SIGTERM on any node, see interrupt_cluster) ends it everywhere. Nothing waits
// without a deadline.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "actors/pipeline.h"
#include "actors/train_pipeline.h"
#include "runtime/cluster_env.h"

namespace libai::actors {

// The job-specific parts of a cluster run. layout() and compute() run on every node and must
// decide the same from the same assignment; plan() and drive() run on node 0 only.
class ClusterJob {
 public:
  virtual ~ClusterJob() = default;
  // This node's devices, measured (the profiles travel in the join request).
  virtual std::vector<wire::DeviceProfile> profile_devices(int node_rank) = 0;
  // Node 0: fills assignment.stage_of and device_of_stage from assignment.devices.
  virtual void plan(wire::Assignment& assignment) = 0;
  virtual PipelineLayout layout(const wire::Assignment& assignment) = 0;
  virtual ComputeFactory compute(const PipelineLayout& layout, const wire::Assignment& assignment) = 0;
  // Node 0: runs the job through the client until it is done (throws on failure).
  virtual void drive(PipelineClient& client, const PipelineLayout& layout) = 0;

  // Training jobs: their programs (on every node, from the same assignment). A job that returns
  // some runs training stage actors (actors/train_pipeline.h) built by train_compute(), and
  // node 0 runs train() (its steps through the client; the cluster then ends the stages)
  // instead of compute() and drive().
  virtual std::optional<TrainPrograms> train_programs(const wire::Assignment&) { return std::nullopt; }
  // data_plane: the nodes' UCX communicator (null on a cluster of one node), for a job whose
  // stages form groups of their own across nodes (actors/jobs/model_train.h).
  virtual TrainComputeFactory train_compute(const PipelineLayout&, const wire::Assignment&,
                                            const std::shared_ptr<comm::Communicator>& data_plane) {
    (void)data_plane;
    return {};
  }
  virtual void train(TrainClient&, const PipelineLayout&) {}
};

struct ClusterOptions {
  std::chrono::milliseconds join_timeout{60000};   // for every node to join
  std::chrono::milliseconds setup_timeout{120000}; // plan, data plane and stage loading
  std::chrono::milliseconds job_timeout{3600000};  // the whole job
  // A node silent, or a stage's thread on one piece of work, for longer ends the job
  // (train.cluster.heartbeat_timeout; Note [Liveness] in actors/cluster/cluster_node.h).
  std::chrono::milliseconds heartbeat_timeout{30000};
  // The data plane between the nodes (train.cluster.transport; Note [Choosing the transport]
  // in actors/cluster/cluster_node.h): "auto" (shared memory when every node shares this host's
  // memory, else UCX), "shm" or "ucx".
  std::string transport = "auto";
  std::function<void(int port)> on_listening;      // node 0, port 0: the port it got
  std::string config_yaml;                         // what node 0 sends in the assignment
};

struct ClusterResult {
  std::vector<wire::StageReport> reports;  // node 0: every stage's; other nodes: their own
  wire::Assignment assignment;
  PipelineLayout layout;
  // Node 0, from the routes: until the job had its last output (what the plan predicts), and
  // until every stage reported (the groups' done packets through every stage, the reports).
  double job_seconds = 0;
  double finish_seconds = 0;
};

ClusterResult run_cluster(const ClusterSpec& spec, ClusterJob& job, const ClusterOptions& options);

// The options train.cluster.* sets: join_timeout and heartbeat_timeout (seconds), and the
// config node 0 sends.
ClusterOptions cluster_options(const config::Config& cfg);

// Asks the run_cluster of this process to end the job everywhere (safe from a signal handler:
// it only sets a flag that the agent polls).
void interrupt_cluster(int signal_number);
// Installs interrupt_cluster for SIGINT and SIGTERM.
void install_interrupt_handlers();

}  // namespace libai::actors
