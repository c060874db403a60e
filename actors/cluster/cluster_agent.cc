// Node k > 0: an agent. It joins node 0, receives the plan, joins the data plane, builds its
// stages and forwards their reports until node 0 says stop.
#include <caf/io/all.hpp>

#include <thread>

#include "actors/cluster/cluster_liveness.h"
#include "actors/cluster/cluster_node.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::actors::cluster {

using namespace std::chrono_literals;

ClusterResult run_agent(Node& node) {
  ClusterResult result;
  auto log = logger("cluster");
  bool got = false;
  const std::string where = str_cat(node.spec.addr, ":", node.spec.port);
  LIBAI_CHECK(!node.spec.token.empty(), "node ", node.spec.node_rank,
              ": a cluster needs a token: set train.cluster.token or LIBAI_CLUSTER_TOKEN");
  // 1. Reach node 0, retrying until the join timeout.
  const auto join_deadline = Clock::now() + node.options.join_timeout;
  caf::actor scheduler;
  std::string last_error;
  while (!scheduler) {
    node.check_interrupt();
    auto found = node.system->middleman().remote_actor(node.spec.addr, uint16_t(node.spec.port));
    if (found) {
      scheduler = *found;
      break;
    }
    last_error = node.system->render(found.error());
    if (Clock::now() > join_deadline)
      LIBAI_THROW(CommunicationError, node.who(), " could not reach node 0 at ", where, " within ",
                  seconds_text(node.options.join_timeout), ": ", last_error);
    std::this_thread::sleep_for(200ms);
  }
  node.me()->monitor(scheduler);
  // The control plane's round trip to node 0 (the best of 5), for the planner's hop cost.
  double rtt = 0;
  for (int32_t i = 0; i < 5; ++i) {
    const auto sent = Clock::now();
    node.me()->send(scheduler, ping_atom::value, i);
    node.me()->receive(
        [&](pong_atom, int32_t) {
          const double seconds = std::chrono::duration<double>(Clock::now() - sent).count();
          rtt = rtt == 0 ? seconds : std::min(rtt, seconds);
        },
        caf::after(2s) >> [] {});
  }
  // Note [The control plane's bandwidth]: 1 MiB to node 0 and back, the best of 3; what it
  // adds to the empty round trip is 2 MiB over the link.
  double bandwidth_gbs = 0;
  {
    const wire::Bytes payload(size_t(1) << 20, std::uint8_t(0));
    double best = 0;
    for (int32_t i = 0; i < 3; ++i) {
      const auto sent = Clock::now();
      node.me()->send(scheduler, ping_atom::value, payload);
      node.me()->receive(
          [&](pong_atom, const wire::Bytes& echo) {
            const double seconds = std::chrono::duration<double>(Clock::now() - sent).count();
            if (echo.size() == payload.size()) best = best == 0 ? seconds : std::min(best, seconds);
          },
          caf::after(2s) >> [] {});
    }
    if (best > rtt && rtt > 0) bandwidth_gbs = 2.0 * double(payload.size()) / (best - rtt) / 1e9;
  }
  wire::JoinRequest request{uint32_t(node.spec.node_rank), node.spec.token, hostname(),
                            node.job.profile_devices(node.spec.node_rank), rtt, host_identity(),
                            bandwidth_gbs};
  node.me()->send(scheduler, join_atom::value, wire::encode(request));

  std::string failure;
  auto on_down = [&](caf::down_msg&) {
    failure = str_cat("node 0 (the scheduler at ", where, ") died");
  };
  auto on_abort = [&](abort_atom, const wire::Bytes& bytes) {
    failure = wire::decode<wire::Abort>(bytes).reason;
    node.me()->send(scheduler, ack_atom::value);  // node 0 may end once its notes arrived
  };
  // Node 0's heartbeats once the job runs (Note [Liveness] in actors/cluster/cluster_node.h): answered
  // with this node's stages, and watched.
  std::optional<NodeZeroWatch> liveness;
  auto on_heartbeat = [&](heartbeat_atom, std::uint64_t seq) {
    if (liveness) liveness->heard(Clock::now());
    node.me()->send(
        scheduler, heartbeat_atom::value,
        wire::encode(wire::Heartbeat{seq, node.spec.node_rank, node.progress.snapshot()}));
  };
  // This node ends the job (Ctrl-C): node 0 is told and answers with the abort it sends every
  // node; waiting for it (a second at most) lets our note leave before this process ends.
  auto interrupted = [&] {
    failure = str_cat("the job was interrupted on node ", node.spec.node_rank, " (signal ",
                      interrupted_signal(), ")");
    node.me()->send(scheduler, abort_atom::value,
                    wire::encode(wire::Abort{failure, node.spec.node_rank}));
    const std::string mine = failure;
    node.me()->receive(
        on_down, on_abort, caf::after(1s) >> [] {});
    failure = mine;
  };
  // Receives until `handler` ran (it sets `got`), node 0 fails, or `timeout`; then throws.
  auto wait_for = [&](std::chrono::milliseconds timeout, const std::string& what,
                      auto&&... handlers) {
    got = false;
    const auto deadline = Clock::now() + timeout;
    while (!got && failure.empty()) {
      if (interrupted_signal()) {
        interrupted();
        break;
      }
      if (Clock::now() > deadline) {
        failure = str_cat(node.who(), ": no ", what, " from node 0 within ", seconds_text(timeout));
        break;
      }
      if (liveness) failure = liveness->verdict(Clock::now(), node.progress.snapshot());
      if (!failure.empty()) break;
      node.me()->receive(
          handlers..., on_down, on_abort, on_heartbeat, caf::after(100ms) >> [] {});
    }
    if (!failure.empty()) {
      node.stop_local_stages(failure);
      LIBAI_THROW(CommunicationError, failure);
    }
  };
  // 2. The join reply, then the assignment.
  wait_for(node.options.join_timeout, "join reply", [&](join_atom, const wire::Bytes& bytes) {
    got = true;
    const auto reply = wire::decode<wire::JoinReply>(bytes);
    if (!reply.accepted) failure = str_cat("node 0 refused ", node.who(), ": ", reply.reason);
  });
  log->info("node {} joined the cluster at {}", node.spec.node_rank, where);
  wait_for(node.options.setup_timeout, "assignment", [&](assign_atom, const wire::Bytes& bytes) {
    got = true;
    result.assignment = wire::decode<wire::Assignment>(bytes);
  });
  // 3. The data plane, this node's stages, and the routes.
  try {
    comm::UcxGroupOptions o;
    o.rank = node.spec.node_rank;
    o.size = node.spec.nodes;
    o.addr = node.spec.addr;
    o.port = result.assignment.data_port;
    o.timeout = node.options.setup_timeout;
    node.set_data_plane(open_data_plane(result.assignment.transport, o, [&] {
      if (interrupted_signal()) {
        interrupted();
      } else {
        node.me()->receive(
            on_down, on_abort, caf::after(100ms) >> [] {});
      }
      if (!failure.empty()) LIBAI_THROW(CommunicationError, failure);
    }));
    node.layout = node.job.layout(result.assignment);
    node.have_layout = true;
    node.stages = node.spawn_stages(result.assignment, node.spec.node_rank);
  } catch (const std::exception& e) {
    const std::string reason = str_cat(node.who(), " could not build its stages: ", e.what());
    node.me()->send(scheduler, failed_atom::value,
                    wire::encode(wire::Abort{reason, node.spec.node_rank}));
    node.stop_local_stages(reason);
    throw;
  }
  node.me()->send(scheduler, ready_atom::value, node.spec.node_rank, node.stages);
  wait_for(node.options.setup_timeout, "routes",
           [&](routes_atom, const std::vector<caf::actor>& table) {
             got = true;
             if (table.size() != node.layout.slots.size() + 1) {
               failure = "node 0 sent a stage table that does not fit the plan";
               return;
             }
             std::vector<caf::actor> handles(table.begin(), table.end() - 1);
             node.connect_stages(node.spec.node_rank, handles, table.back());
             liveness.emplace(node.options.heartbeat_timeout,
                              str_cat("node 0 (the scheduler at ", where, ")"), Clock::now());
           });
  // 4. Forward the stages' reports until node 0 says stop.
  // Runs until node 0 says stop (a stage failure is forwarded and ends the job here too).
  wait_for(
      node.options.job_timeout, "stop", [&](stop_atom) { got = true; },
      [&](finished_atom, const wire::Bytes& bytes) {
        result.reports.push_back(wire::decode<wire::StageReport>(bytes));
        node.me()->send(scheduler, report_atom::value, bytes);
      },
      [&](failed_atom, const std::string& what) {
        // Node 0's verdict may name the cause better (Note [A death names the failure] in
        // actors/cluster/cluster_scheduler.cc): wait a second for its abort before ending with ours.
        node.me()->send(scheduler, failed_atom::value,
                        wire::encode(wire::Abort{what, node.spec.node_rank}));
        node.me()->receive(on_down, on_abort, caf::after(1s) >> [] {});
        if (failure.empty()) failure = what;
      });
  result.layout = node.layout;
  return result;
}

}  // namespace libai::actors::cluster
