// Node 0: the scheduler. It accepts the joins, plans, opens the data plane, gathers the stage
// handles, runs the job on its own thread and watches the cluster until every stage reported.
#include <caf/io/all.hpp>

#include <algorithm>
#include <future>
#include <set>
#include <thread>

#include "actors/cluster/cluster_liveness.h"
#include "actors/cluster/cluster_node.h"
#include "actors/cluster/guarded_publish.h"
#include "actors/synthetic.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::actors::cluster {

namespace {

using namespace std::chrono_literals;

struct Scheduler {
  Node& node;
  std::vector<caf::actor> agents;  // by node rank (0: none)
  std::vector<std::vector<wire::DeviceProfile>> devices;
  std::set<int> dead;
  std::set<int> hung;  // stopped answering heartbeats (Note [Liveness])
  bool aborted_ = false;
  std::vector<double> control_rtts;  // the agents' measured round trips to node 0
  std::vector<double> control_bandwidths;  // and bandwidths (GB/s; 0: not measured)
  std::vector<std::string> host_keys;  // by node rank (runtime/host_identity.h)

  explicit Scheduler(Node& n)
      : node(n),
        agents(size_t(n.spec.nodes)),
        devices(size_t(n.spec.nodes)),
        host_keys(size_t(n.spec.nodes)) {
    host_keys[0] = host_identity();
  }

  int rank_of(const caf::actor_addr& addr) const {
    for (size_t k = 1; k < agents.size(); ++k)
      if (agents[k] && agents[k].address() == addr) return int(k);
    return -1;
  }

  // Ends the job on every node that is still there, then throws `reason`.
  [[noreturn]] void abort_all(const std::string& reason) {
    logger("cluster")->error("{}", reason);
    const wire::Bytes note = wire::encode(wire::Abort{reason, 0});
    size_t waiting = 0;
    for (size_t k = 1; k < agents.size(); ++k)
      if (agents[k] && !dead.count(int(k))) {
        node.me()->send(agents[k], abort_atom::value, note);
        // A hung node gets the note too (it ends with the reason once it runs again) but
        // cannot acknowledge it now.
        if (!hung.count(int(k))) ++waiting;
      }
    node.stop_local_stages(reason);
    // The notes must leave before this process ends (CAF sends asynchronously): each live
    // agent acknowledges its note or is seen gone, within a second at most.
    // A node that has not joined yet learns the reason from the refusal of its join.
    bool all_joined = true;
    for (size_t k = 1; k < agents.size(); ++k) all_joined = all_joined && agents[k];
    const auto deadline = Clock::now() + 1s;
    while ((waiting > 0 || !all_joined) && Clock::now() < deadline)
      node.me()->receive(
          [&](ack_atom) { --waiting; },
          [&](join_atom, const wire::Bytes&) {
            auto sender = caf::actor_cast<caf::actor>(node.me()->current_sender());
            node.me()->send(sender, join_atom::value, wire::encode(wire::JoinReply{false, reason}));
          },
          [&](caf::down_msg& msg) {
            const int rank = rank_of(msg.source);
            if (rank > 0 && !dead.count(rank)) {
              dead.insert(rank);
              --waiting;
            }
          },
          caf::after(
              std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())) >>
              [] {});
    LIBAI_THROW(CommunicationError, reason);
  }

  // Note [A death names the failure]
  // A node that dies is seen by the other nodes' data planes (the shm plane checks its peers'
  // processes every 100 ms; UCX sees the connection close) about as soon as node 0's control
  // plane sees it, so the first report to arrive can be a consequence ("shm message plane on
  // rank 1: rank 2 (pid ...) died", a stage whose send failed) rather than the cause. Before
  // it ends the job for a reported failure, node 0 gives the control plane 300 ms to report a
  // death, and names the death instead ("node 2 died (stage 2)"); the other nodes wait for node
  // 0's verdict after they report (actors/cluster/cluster_agent.cc).
  void prefer_a_death(std::string& failure) {
    if (failure.find(" died (") != std::string::npos && failure.rfind("node ", 0) == 0) return;
    const auto until = Clock::now() + 300ms;
    for (bool more = true; more && Clock::now() < until;)
      node.me()->receive(
          [&](caf::down_msg& msg) {
            const int rank = rank_of(msg.source);
            if (rank > 0 && !dead.count(rank)) {
              failure = died(rank);
              more = false;
            }
          },
          caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now())) >>
              [&] { more = false; });
  }

  std::string died(int rank) {
    dead.insert(rank);
    return str_cat("node ", rank, " died (", node.stages_of(rank), ")");
  }

  void publish() {
    const char* bind = node.spec.addr == "127.0.0.1" || node.spec.addr == "localhost"
                           ? "127.0.0.1"
                           : nullptr;  // any interface
    // Note [Guarding the control port]: a peer that does not speak BASP is logged and dropped.
    auto port = publish_guarded(*node.system, caf::actor{node.me()}, uint16_t(node.spec.port),
                                bind, true, "node 0");
    LIBAI_CHECK_KIND(CommunicationError, bool(port), "node 0 cannot listen on ", node.spec.addr,
                     ":", node.spec.port, ": ", node.system->render(port.error()));
    logger("cluster")->info("node 0 listening on {}:{}; waiting for {} more node(s)",
                            node.spec.addr, *port, node.spec.nodes - 1);
    if (node.options.on_listening) node.options.on_listening(int(*port));
  }

  void accept_joins() {
    devices[0] = node.job.profile_devices(0);
    int joined = 1;
    const auto deadline = Clock::now() + node.options.join_timeout;
    while (joined < node.spec.nodes) {
      node.check_interrupt();
      if (Clock::now() > deadline) {
        std::string missing;
        for (int k = 1; k < node.spec.nodes; ++k)
          if (!agents[size_t(k)]) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
        abort_all(str_cat("node(s) ", missing, " did not join within ",
                          seconds_text(node.options.join_timeout), " (node 0 at ", node.spec.addr,
                          ":", node.spec.port, ", ", joined, " of ", node.spec.nodes,
                          " nodes present)"));
      }
      node.me()->receive(
          [&](join_atom, const wire::Bytes& bytes) {
            auto sender = caf::actor_cast<caf::actor>(node.me()->current_sender());
            wire::JoinReply reply{true, ""};
            wire::JoinRequest request;
            try {
              request = wire::decode<wire::JoinRequest>(bytes);
            } catch (const CorruptInput& e) {
              reply = {false, e.what()};
            }
            if (reply.accepted && request.token != node.spec.token)
              reply = {false, str_cat("wrong cluster token from node ", request.node_rank, " (",
                                      request.hostname, ")")};
            else if (reply.accepted &&
                     (request.node_rank == 0 || int(request.node_rank) >= node.spec.nodes))
              reply = {false,
                       str_cat("node rank ", request.node_rank, " is outside [1, ", node.spec.nodes,
                               ") for a cluster of ", node.spec.nodes, " nodes")};
            else if (reply.accepted && agents[request.node_rank])
              reply = {false, str_cat("node rank ", request.node_rank, " joined twice (from ",
                                      request.hostname, ")")};
            node.me()->send(sender, join_atom::value, wire::encode(reply));
            if (!reply.accepted) {
              logger("cluster")->warn("refused a join: {}", reply.reason);
              return;
            }
            agents[request.node_rank] = sender;
            devices[request.node_rank] = request.devices;
            host_keys[request.node_rank] = request.host_key;
            control_rtts.push_back(request.control_rtt_seconds);
            control_bandwidths.push_back(request.control_bandwidth_gbs);
            node.me()->monitor(sender);
            ++joined;
            logger("cluster")->info("node {} ({}) joined with {} device(s)", request.node_rank,
                                    request.hostname, request.devices.size());
          },
          [&](caf::down_msg& msg) {
            const int rank = rank_of(msg.source);
            if (rank > 0) abort_all(died(rank) + " while the cluster was forming");
          },
          [&](ping_atom, int32_t seq) {
            node.me()->send(caf::actor_cast<caf::actor>(node.me()->current_sender()),
                            pong_atom::value, seq);
          },
          // Note [The control plane's bandwidth]: echoed, up to 1 MiB (larger is not a probe).
          [&](ping_atom, const wire::Bytes& payload) {
            if (payload.size() <= (size_t(1) << 20))
              node.me()->send(caf::actor_cast<caf::actor>(node.me()->current_sender()),
                              pong_atom::value, payload);
          },
          [&](abort_atom, const wire::Bytes&) {}, caf::after(100ms) >> [] {});
    }
  }

  // One round of the control plane while the data plane forms: a node that dies or aborts
  // ends the job now.
  void watch_while_forming() {
    std::string failure;
    if (interrupted_signal())
      failure = str_cat("the job was interrupted on node 0 (signal ", interrupted_signal(), ")");
    else
      node.me()->receive(
          [&](caf::down_msg& msg) {
            const int rank = rank_of(msg.source);
            if (rank > 0) failure = died(rank) + " while the data plane was forming";
          },
          [&](abort_atom, const wire::Bytes& bytes) {
            failure = wire::decode<wire::Abort>(bytes).reason;
          },
          [&](failed_atom, const wire::Bytes& bytes) {
            failure = wire::decode<wire::Abort>(bytes).reason;
          },
          caf::after(100ms) >> [] {});
    if (!failure.empty()) {
      aborted_ = true;
      abort_all(failure);
    }
  }

  // One packet hop between actors of this process, measured: a one-stage pipeline of no
  // work passes a group's packet driver -> stage -> driver for 40 steps.
  double measure_local_hop() {
    PipelineLayout layout = make_layout({.dp = 1, .pp = 1, .tp = 1}, 1);
    LocalPipeline pipeline(*node.system, layout,
                           [](const SlotSpec&) { return std::make_shared<SyntheticCompute>(0.0); });
    const int steps = 40;
    const auto start = Clock::now();
    run_synthetic_job(pipeline.client(), layout, steps);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    pipeline.wait(std::chrono::seconds(10));
    return seconds / (2.0 * steps);
  }

  wire::Assignment assign() {
    wire::Assignment a;
    try {
      a.local_hop_seconds = measure_local_hop();
    } catch (const std::exception& e) {
      logger("cluster")->warn("could not measure the local hop latency: {}", e.what());
    }
    // A hop between nodes: the control plane's one-way time (half the agents' median round
    // trip) plus the receiving process's own hop to the stage's thread.
    std::vector<double> rtts;
    for (double rtt : control_rtts)
      if (rtt > 0) rtts.push_back(rtt);
    if (!rtts.empty()) {
      std::sort(rtts.begin(), rtts.end());
      a.remote_hop_seconds = rtts[rtts.size() / 2] / 2 + a.local_hop_seconds;
    }
    // The slowest node's control-plane bandwidth stands for the link between nodes.
    for (double b : control_bandwidths)
      if (b > 0 && (a.inter_node_bandwidth_gbs == 0 || b < a.inter_node_bandwidth_gbs))
        a.inter_node_bandwidth_gbs = b;
    logger("cluster")->info(
        "measured packet hops: {:.1f} us in this process, {:.1f} us between nodes; control plane "
        "between nodes {:.3g} GB/s",
        a.local_hop_seconds * 1e6, a.remote_hop_seconds * 1e6, a.inter_node_bandwidth_gbs);
    a.config_yaml = node.options.config_yaml;
    for (const auto& d : devices) a.devices.insert(a.devices.end(), d.begin(), d.end());
    try {
      node.job.plan(a);
      node.layout = node.job.layout(a);  // from here on, a node that dies is named by its stages
      node.have_layout = true;
    } catch (const std::exception& e) {
      abort_all(e.what());  // every node names why (a plan that does not fit, ...)
    }
    end_if_a_node_failed_while_planning();
    if (node.spec.nodes > 1) {
      try {
        a.transport = choose_transport(node.options.transport, host_keys);
      } catch (const std::exception& e) {
        abort_all(e.what());
      }
      logger("cluster")->info("data plane between the {} nodes: {}", node.spec.nodes,
                              a.transport == "shm" ? "shared memory (one host)" : "UCX");
      comm::UcxGroupOptions o;
      o.rank = 0;
      o.size = node.spec.nodes;
      o.addr = node.spec.addr;
      o.port = 0;
      o.timeout = node.options.setup_timeout;
      // Once the data plane listens, every node learns the plan and where to meet.
      auto send_assignment = [&](int port) {
        a.data_port = uint16_t(port);
        const wire::Bytes bytes = wire::encode(a);
        for (size_t k = 1; k < agents.size(); ++k)
          node.me()->send(agents[k], assign_atom::value, bytes);
      };
      try {
        node.set_data_plane(open_data_plane(
            a.transport, o, [&] { watch_while_forming(); }, send_assignment));
      } catch (const CommunicationError& e) {
        if (!aborted_) abort_all(str_cat("the data plane did not form: ", e.what()));
        throw;
      }
    }
    return a;
  }

  // The agents wait for the assignment while node 0 plans (compiling and simulating a long
  // generation takes a while): a node that died or was interrupted meanwhile ends the job now,
  // before the data plane forms (which would wait for it until its timeout).
  void end_if_a_node_failed_while_planning() {
    std::string failure;
    for (bool more = true; more && failure.empty();) {
      more = false;
      node.me()->receive(
          [&](caf::down_msg& msg) {
            more = true;
            if (const int rank = rank_of(msg.source); rank > 0) failure = died(rank);
          },
          [&](abort_atom, const wire::Bytes& bytes) {
            more = true;
            failure = wire::decode<wire::Abort>(bytes).reason;
          },
          caf::after(std::chrono::milliseconds(0)) >> [] {});
    }
    if (failure.empty() && interrupted_signal())
      failure = str_cat("the job was interrupted on node 0 (signal ", interrupted_signal(), ")");
    if (!failure.empty()) abort_all(failure);
  }

  std::vector<caf::actor> gather_handles(ClusterResult& result) {
    std::vector<caf::actor> handles = node.stages;
    std::set<int> ready{0};
    const auto deadline = Clock::now() + node.options.setup_timeout;
    while (int(ready.size()) < node.spec.nodes) {
      node.check_interrupt();
      if (Clock::now() > deadline)
        abort_all(str_cat("not every node built its stages within ",
                          seconds_text(node.options.setup_timeout)));
      std::string failure;
      node.me()->receive(
          [&](ready_atom, int rank, const std::vector<caf::actor>& theirs) {
            if (rank <= 0 || rank >= node.spec.nodes || theirs.size() != handles.size()) {
              failure =
                  str_cat("node ", rank, " reported a stage table that does not fit the plan");
              return;
            }
            for (size_t i = 0; i < theirs.size(); ++i)
              if (node.layout.slots[i].node == rank) handles[i] = theirs[i];
            ready.insert(rank);
          },
          [&](failed_atom, const wire::Bytes& bytes) {
            failure = wire::decode<wire::Abort>(bytes).reason;
          },
          [&](failed_atom, const std::string& what) { failure = what; },
          [&](abort_atom, const wire::Bytes& bytes) {
            failure = wire::decode<wire::Abort>(bytes).reason;
          },
          [&](caf::down_msg& msg) {
            const int rank = rank_of(msg.source);
            if (rank > 0) failure = died(rank);
          },
          [&](finished_atom, const wire::Bytes& bytes) {
            result.reports.push_back(wire::decode<wire::StageReport>(bytes));
          },
          caf::after(100ms) >> [] {});
      if (!failure.empty()) abort_all(failure);
    }
    return handles;
  }
};

}  // namespace

ClusterResult run_node0(Node& node) {
  ClusterResult result;
  Scheduler scheduler(node);
  if (node.spec.nodes > 1) {
    LIBAI_CHECK(!node.spec.token.empty(), "a cluster of ", node.spec.nodes,
                " nodes needs a token: set train.cluster.token or LIBAI_CLUSTER_TOKEN");
    scheduler.publish();
  }
  scheduler.accept_joins();
  result.assignment = scheduler.assign();  // and node.layout
  auto client = std::make_shared<PipelineClient>();
  auto train_client = std::make_shared<TrainClient>();
  try {
    node.stages = node.spawn_stages(result.assignment, 0);
    node.driver =
        node.training
            ? spawn_train_driver(*node.system, train_client)
            : spawn_driver(*node.system,
                           DriverSetup{.node = 0, .client = client, .plane = node.plane.plane});
    if (node.plane && !node.training)
      add_driver_channels(node.layout, *node.plane.inbox, node.driver);
  } catch (const std::exception& e) {
    scheduler.abort_all(str_cat("node 0 could not build its stages: ", e.what()));
  }
  std::vector<caf::actor> handles = scheduler.gather_handles(result);
  std::vector<caf::actor> table = handles;
  table.push_back(node.driver);
  for (size_t k = 1; k < scheduler.agents.size(); ++k)
    node.me()->send(scheduler.agents[k], routes_atom::value, table);
  node.connect_stages(0, handles, node.driver);

  // The job runs on its own thread; this one watches the cluster (and its liveness: Note
  // [Liveness] in actors/cluster/cluster_node.h).
  std::vector<std::string> stages_of(size_t(node.spec.nodes));
  for (int k = 0; k < node.spec.nodes; ++k) stages_of[size_t(k)] = node.stages_of(k);
  HeartbeatMonitor liveness(node.options.heartbeat_timeout, stages_of, Clock::now());
  const auto start = Clock::now();
  std::promise<void> job_done;
  auto job_result = job_done.get_future();
  Clock::time_point outputs_in = start;
  std::thread job_thread([&] {
    try {
      if (node.training) {
        node.job.train(*train_client, node.layout);
        train_client->finish();  // every stage reports, then the job ends
      } else {
        node.job.drive(*client, node.layout);
      }
      outputs_in = Clock::now();
      job_done.set_value();
    } catch (...) {
      job_done.set_exception(std::current_exception());
    }
  });
  std::string failure;
  const auto deadline = start + node.options.job_timeout;
  bool job_finished = false;
  while (failure.empty() && (!job_finished || result.reports.size() < node.layout.slots.size())) {
    if (interrupted_signal())
      failure = str_cat("the job was interrupted on node 0 (signal ", interrupted_signal(), ")");
    else if (Clock::now() > deadline)
      failure = str_cat("the job did not finish within ", seconds_text(node.options.job_timeout));
    if (!failure.empty()) break;
    if (liveness.due(Clock::now()))
      for (size_t k = 1; k < scheduler.agents.size(); ++k)
        if (!scheduler.dead.count(int(k)))
          node.me()->send(scheduler.agents[k], heartbeat_atom::value, liveness.seq());
    if (auto verdict = liveness.verdict(Clock::now(), node.progress.snapshot());
        !verdict.failure.empty()) {
      if (verdict.silent_node > 0) scheduler.hung.insert(verdict.silent_node);
      failure = verdict.failure;
      break;
    }
    if (!job_finished && job_result.wait_for(0s) == std::future_status::ready) {
      job_finished = true;
      try {
        job_result.get();
      } catch (const std::exception& e) {
        // A stage's own failure, when it is on its way, names the cause better.
        node.me()->receive([&](failed_atom, const std::string& what) { failure = what; },
                           [&](failed_atom, const wire::Bytes& bytes) {
                             failure = wire::decode<wire::Abort>(bytes).reason;
                           },
                           caf::after(200ms) >> [&] { failure = e.what(); });
        break;
      }
      continue;  // the reports may all be in already: check before waiting for more
    }
    node.me()->receive(
        [&](finished_atom, const wire::Bytes& bytes) {
          result.reports.push_back(wire::decode<wire::StageReport>(bytes));
        },
        [&](report_atom, const wire::Bytes& bytes) {
          result.reports.push_back(wire::decode<wire::StageReport>(bytes));
        },
        [&](failed_atom, const std::string& what) { failure = what; },
        [&](failed_atom, const wire::Bytes& bytes) {
          failure = wire::decode<wire::Abort>(bytes).reason;
        },
        [&](abort_atom, const wire::Bytes& bytes) {
          failure = wire::decode<wire::Abort>(bytes).reason;
        },
        [&](heartbeat_atom, const wire::Bytes& bytes) {
          liveness.heard(wire::decode<wire::Heartbeat>(bytes), Clock::now());
        },
        [&](caf::down_msg& msg) {
          const int rank = scheduler.rank_of(msg.source);
          if (rank > 0) {
            liveness.forget(rank);
            failure = scheduler.died(rank);
          }
        },
        caf::after(50ms) >> [] {});
  }
  if (!failure.empty()) {
    scheduler.prefer_a_death(failure);
    client->fail(failure);
    train_client->fail(failure);
    job_thread.join();
    scheduler.abort_all(failure);
  }
  job_thread.join();
  result.finish_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.job_seconds = std::chrono::duration<double>(outputs_in - start).count();
  for (size_t k = 1; k < scheduler.agents.size(); ++k)
    node.me()->send(scheduler.agents[k], stop_atom::value);
  if (node.training)
    caf::anon_send(node.driver, abort_atom::value);
  else
    caf::anon_send(node.driver, stop_atom::value);
  result.layout = node.layout;
  return result;
}

}  // namespace libai::actors::cluster
