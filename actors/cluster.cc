#include "actors/cluster.h"

#include "actors/synthetic.h"

#include <caf/io/all.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <future>
#include <set>
#include <thread>

#include "actors/packet_inbox.h"
#include "runtime/comm/ucx_communicator.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::actors {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::atomic<int> g_interrupted{0};

std::string hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

// "stage 1, stage 2" held by `node`.
std::string stages_of_node(const PipelineLayout& layout, int node) {
  std::string out;
  for (const SlotSpec& slot : layout.slots)
    if (slot.node == node) out += (out.empty() ? "" : ", ") + slot.name();
  return out.empty() ? "no stages" : out;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  return str_cat(double(ms.count()) / 1000.0, " s");
}

// Everything of one node's run that outlives a phase.
struct Node {
  const ClusterSpec& spec;
  ClusterJob& job;
  const ClusterOptions& options;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<caf::scoped_actor> self;
  std::shared_ptr<comm::Communicator> data_plane;
  NodePlane plane;  // packets and credits between nodes, over the data plane
  PipelineLayout layout;
  bool have_layout = false;
  std::vector<caf::actor> stages;  // this node's (null for other nodes' slots)
  caf::actor driver;               // node 0
  std::optional<TrainPrograms> training;  // a training job's programs

  Node(const ClusterSpec& s, ClusterJob& j, const ClusterOptions& o) : spec(s), job(j), options(o) {
    configure_actor_system(config);
    system = std::make_unique<caf::actor_system>(config);
    self = std::make_unique<caf::scoped_actor>(*system);
  }

  caf::scoped_actor& me() { return *self; }
  std::string who() const { return str_cat("node ", spec.node_rank); }
  std::string stages_of(int node) const {
    return have_layout ? stages_of_node(layout, node) : "stages not yet assigned";
  }

  // The message plane over the data plane (actors/packet_inbox.h), started before this node
  // reports ready; its failures end the job like a stage's.
  void start_plane() {
    plane = start_node_plane(data_plane, options.setup_timeout,
                             [me = caf::actor{me()}](const std::string& error) {
                               caf::anon_send(me, failed_atom::value, error);
                             });
  }

  void stop_local_stages() {
    if (plane) plane.plane->abort("the job was aborted");
    for (auto& stage : stages)
      if (stage) caf::anon_send(stage, abort_atom::value, std::string("job aborted"));
    // The train driver's stop would ask the stages to end normally: abort it instead.
    if (driver && training) caf::anon_send(driver, abort_atom::value);
    else if (driver) caf::anon_send(driver, stop_atom::value);
  }

  // This node's stage actors, forward or training ones.
  std::vector<caf::actor> spawn_stages(const wire::Assignment& assignment, int rank) {
    training = job.train_programs(assignment);
    if (training)
      return spawn_train_slots(*system, layout, *training, rank,
                               job.train_compute(layout, assignment, data_plane), plane,
                               caf::actor{me()});
    return spawn_slots(*system, layout, rank, job.compute(layout, assignment), plane,
                       caf::actor{me()});
  }

  void connect_stages(int rank, const std::vector<caf::actor>& handles, const caf::actor& to_driver) {
    if (training)
      connect_train_slots(layout, *training, rank, handles, to_driver);
    else
      connect_slots(layout, rank, handles, to_driver);
  }

  void check_interrupt() {
    if (const int sig = g_interrupted.load())
      LIBAI_THROW(CommunicationError, who(), " was interrupted (signal ", sig, ")");
  }
};

// Opens the UCX data plane on a thread of its own while the caller keeps watching the
// control plane: `watch` receives control messages for a moment and throws when a node died
// or the job was aborted, so that a node lost while the data plane forms ends the job at
// once instead of at the data plane's timeout. The thread is detached: after such a failure
// it still waits in the rendezvous until its own timeout, owning only its shared state.
std::shared_ptr<comm::Communicator> open_data_plane(comm::UcxGroupOptions options,
                                                    const std::function<void()>& watch,
                                                    const std::function<void(int)>& on_port = {}) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    bool done = false;
    int port = -1;
    std::shared_ptr<comm::Communicator> comm;
    std::exception_ptr error;
  };
  auto shared = std::make_shared<Shared>();
  options.on_listening = [shared](int port) {
    std::lock_guard lock(shared->mutex);
    shared->port = port;
    shared->changed.notify_all();
  };
  std::thread([shared, options] {
    std::shared_ptr<comm::Communicator> comm;
    std::exception_ptr error;
    try {
      comm = comm::make_ucx_communicator(options);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(shared->mutex);
    shared->comm = std::move(comm);
    shared->error = error;
    shared->done = true;
    shared->changed.notify_all();
  }).detach();
  bool told_port = false;
  for (;;) {
    {
      std::unique_lock lock(shared->mutex);
      shared->changed.wait_for(lock, 10ms, [&] { return shared->done || (!told_port && shared->port >= 0); });
      if (!told_port && shared->port >= 0 && on_port) {
        const int port = shared->port;
        told_port = true;
        lock.unlock();
        on_port(port);
        continue;
      }
      if (shared->done) {
        if (shared->error) std::rethrow_exception(shared->error);
        return shared->comm;
      }
    }
    watch();
  }
}

// ---------------------------------------------------------------------------------------------
// Node 0: the scheduler.

struct Scheduler {
  Node& node;
  std::vector<caf::actor> agents;  // by node rank (0: none)
  std::vector<std::vector<wire::DeviceProfile>> devices;
  std::set<int> dead;
  bool aborted_ = false;
  std::vector<double> control_rtts;  // the agents' measured round trips to node 0

  explicit Scheduler(Node& n) : node(n), agents(size_t(n.spec.nodes)), devices(size_t(n.spec.nodes)) {}

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
        ++waiting;
      }
    node.stop_local_stages();
    // The notes must leave before this process ends (CAF sends asynchronously): each live
    // agent acknowledges its note or is seen gone, within a second at most.
    // A node that has not joined yet learns the reason from the refusal of its join.
    bool all_joined = true;
    for (size_t k = 1; k < agents.size(); ++k) all_joined = all_joined && agents[k];
    const auto deadline = Clock::now() + 1s;
    while ((waiting > 0 || !all_joined) && Clock::now() < deadline)
      node.me()->receive([&](ack_atom) { --waiting; },
                         [&](join_atom, const wire::Bytes&) {
                           auto sender = caf::actor_cast<caf::actor>(node.me()->current_sender());
                           node.me()->send(sender, join_atom::value,
                                           wire::encode(wire::JoinReply{false, reason}));
                         },
                         [&](caf::down_msg& msg) {
                           const int rank = rank_of(msg.source);
                           if (rank > 0 && !dead.count(rank)) {
                             dead.insert(rank);
                             --waiting;
                           }
                         },
                         caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - Clock::now())) >> [] {});
    LIBAI_THROW(CommunicationError, reason);
  }

  std::string died(int rank) {
    dead.insert(rank);
    return str_cat("node ", rank, " died (", node.stages_of(rank), ")");
  }

  void publish() {
    const char* bind = node.spec.addr == "127.0.0.1" || node.spec.addr == "localhost"
                           ? "127.0.0.1"
                           : nullptr;  // any interface
    auto port = node.system->middleman().publish(caf::actor{node.me()}, uint16_t(node.spec.port),
                                                 bind, true);
    LIBAI_CHECK_KIND(CommunicationError, bool(port), "node 0 cannot listen on ",
                     node.spec.addr, ":", node.spec.port, ": ",
                     node.system->render(port.error()));
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
              reply = {false, str_cat("node rank ", request.node_rank, " is outside [1, ",
                                      node.spec.nodes, ") for a cluster of ", node.spec.nodes,
                                      " nodes")};
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
            control_rtts.push_back(request.control_rtt_seconds);
            node.me()->monitor(sender);
            ++joined;
            logger("cluster")->info("node {} ({}) joined with {} device(s)",
                                         request.node_rank, request.hostname,
                                         request.devices.size());
          },
          [&](caf::down_msg& msg) {
            const int rank = rank_of(msg.source);
            if (rank > 0) abort_all(died(rank) + " while the cluster was forming");
          },
          [&](ping_atom, int32_t seq) {
            node.me()->send(caf::actor_cast<caf::actor>(node.me()->current_sender()),
                            pong_atom::value, seq);
          },
          [&](abort_atom, const wire::Bytes&) {}, caf::after(100ms) >> [] {});
    }
  }

  // One round of the control plane while the data plane forms: a node that dies or aborts
  // ends the job now.
  void watch_while_forming() {
    std::string failure;
    if (g_interrupted.load())
      failure = str_cat("the job was interrupted on node 0 (signal ", g_interrupted.load(), ")");
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
    LocalPipeline pipeline(*node.system, layout, [](const SlotSpec&) {
      return std::make_shared<SyntheticCompute>(0.0);
    });
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
    for (double rtt : control_rtts) if (rtt > 0) rtts.push_back(rtt);
    if (!rtts.empty()) {
      std::sort(rtts.begin(), rtts.end());
      a.remote_hop_seconds = rtts[rtts.size() / 2] / 2 + a.local_hop_seconds;
    }
    logger("cluster")->info("measured packet hops: {:.1f} us in this process, {:.1f} us between nodes",
                            a.local_hop_seconds * 1e6, a.remote_hop_seconds * 1e6);
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
        node.data_plane = open_data_plane(o, [&] { watch_while_forming(); }, send_assignment);
      } catch (const CommunicationError& e) {
        if (!aborted_) abort_all(str_cat("the data plane did not form: ", e.what()));
        throw;
      }
      node.start_plane();
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
    if (failure.empty() && g_interrupted.load())
      failure = str_cat("the job was interrupted on node 0 (signal ", g_interrupted.load(), ")");
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
              failure = str_cat("node ", rank, " reported a stage table that does not fit the plan");
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
    node.driver = node.training ? spawn_train_driver(*node.system, train_client)
                                : spawn_driver(*node.system, DriverSetup{.node = 0, .client = client,
                                                                         .plane = node.plane.plane});
    if (node.plane && !node.training) add_driver_channels(node.layout, *node.plane.inbox, node.driver);
  } catch (const std::exception& e) {
    scheduler.abort_all(str_cat("node 0 could not build its stages: ", e.what()));
  }
  std::vector<caf::actor> handles = scheduler.gather_handles(result);
  std::vector<caf::actor> table = handles;
  table.push_back(node.driver);
  for (size_t k = 1; k < scheduler.agents.size(); ++k)
    node.me()->send(scheduler.agents[k], routes_atom::value, table);
  node.connect_stages(0, handles, node.driver);

  // The job runs on its own thread; this one watches the cluster.
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
    if (g_interrupted.load()) failure = str_cat("the job was interrupted on node 0 (signal ",
                                                g_interrupted.load(), ")");
    else if (Clock::now() > deadline)
      failure = str_cat("the job did not finish within ", seconds_text(node.options.job_timeout));
    if (!failure.empty()) break;
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
        [&](caf::down_msg& msg) {
          const int rank = scheduler.rank_of(msg.source);
          if (rank > 0) failure = scheduler.died(rank);
        },
        caf::after(50ms) >> [] {});
  }
  if (!failure.empty()) {
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

// ---------------------------------------------------------------------------------------------
// Node k > 0: an agent.

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
  wire::JoinRequest request{uint32_t(node.spec.node_rank), node.spec.token, hostname(),
                            node.job.profile_devices(node.spec.node_rank), rtt};
  node.me()->send(scheduler, join_atom::value, wire::encode(request));

  std::string failure;
  auto on_down = [&](caf::down_msg&) {
    failure = str_cat("node 0 (the scheduler at ", where, ") died");
  };
  auto on_abort = [&](abort_atom, const wire::Bytes& bytes) {
    failure = wire::decode<wire::Abort>(bytes).reason;
    node.me()->send(scheduler, ack_atom::value);  // node 0 may end once its notes arrived
  };
  // This node ends the job (Ctrl-C): node 0 is told and answers with the abort it sends every
  // node; waiting for it (a second at most) lets our note leave before this process ends.
  auto interrupted = [&] {
    failure = str_cat("the job was interrupted on node ", node.spec.node_rank, " (signal ",
                      g_interrupted.load(), ")");
    node.me()->send(scheduler, abort_atom::value,
                    wire::encode(wire::Abort{failure, node.spec.node_rank}));
    const std::string mine = failure;
    node.me()->receive(on_down, on_abort, caf::after(1s) >> [] {});
    failure = mine;
  };
  // Receives until `handler` ran (it sets `got`), node 0 fails, or `timeout`; then throws.
  auto wait_for = [&](std::chrono::milliseconds timeout, const std::string& what, auto&&... handlers) {
    got = false;
    const auto deadline = Clock::now() + timeout;
    while (!got && failure.empty()) {
      if (g_interrupted.load()) {
        interrupted();
        break;
      }
      if (Clock::now() > deadline) {
        failure = str_cat(node.who(), ": no ", what, " from node 0 within ", seconds_text(timeout));
        break;
      }
      node.me()->receive(handlers..., on_down, on_abort, caf::after(100ms) >> [] {});
    }
    if (!failure.empty()) {
      node.stop_local_stages();
      LIBAI_THROW(CommunicationError, failure);
    }
  };
  // 2. The join reply, then the assignment.
  wait_for(
      node.options.join_timeout, "join reply", [&](join_atom, const wire::Bytes& bytes) {
        got = true;
        const auto reply = wire::decode<wire::JoinReply>(bytes);
        if (!reply.accepted) failure = str_cat("node 0 refused ", node.who(), ": ", reply.reason);
      });
  log->info("node {} joined the cluster at {}", node.spec.node_rank, where);
  wait_for(
      node.options.setup_timeout, "assignment", [&](assign_atom, const wire::Bytes& bytes) {
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
    node.data_plane = open_data_plane(o, [&] {
      if (g_interrupted.load()) {
        interrupted();
      } else {
        node.me()->receive(on_down, on_abort, caf::after(100ms) >> [] {});
      }
      if (!failure.empty()) LIBAI_THROW(CommunicationError, failure);
    });
    node.start_plane();
    node.layout = node.job.layout(result.assignment);
    node.have_layout = true;
    node.stages = node.spawn_stages(result.assignment, node.spec.node_rank);
  } catch (const std::exception& e) {
    const std::string reason = str_cat(node.who(), " could not build its stages: ", e.what());
    node.me()->send(scheduler, failed_atom::value, wire::encode(wire::Abort{reason, node.spec.node_rank}));
    node.stop_local_stages();
    throw;
  }
  node.me()->send(scheduler, ready_atom::value, node.spec.node_rank, node.stages);
  wait_for(
      node.options.setup_timeout, "routes", [&](routes_atom, const std::vector<caf::actor>& table) {
        got = true;
        if (table.size() != node.layout.slots.size() + 1) {
          failure = "node 0 sent a stage table that does not fit the plan";
          return;
        }
        std::vector<caf::actor> handles(table.begin(), table.end() - 1);
        node.connect_stages(node.spec.node_rank, handles, table.back());
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
        node.me()->send(scheduler, failed_atom::value,
                        wire::encode(wire::Abort{what, node.spec.node_rank}));
        failure = what;
      });
  result.layout = node.layout;
  return result;
}

}  // namespace

ClusterResult run_cluster(const ClusterSpec& spec, ClusterJob& job, const ClusterOptions& options) {
  auto node = std::make_unique<Node>(spec, job, options);
  try {
    ClusterResult result = spec.node_rank == 0 ? run_node0(*node) : run_agent(*node);
    return result;
  } catch (...) {
    // After a failure a stage's thread may still wait on a dead peer (until the data plane's
    // timeout): tear the node down on another thread and give up on it after 2 s, so that the
    // error reaches the caller at once. An abandoned node's threads end with the process.
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    std::thread([node = std::move(node), done]() mutable {
      node.reset();
      done->set_value();
    }).detach();
    if (finished.wait_for(2s) != std::future_status::ready)
      logger("cluster")->debug("node {}: teardown after the failure takes over 2 s; leaving it to "
                               "the process exit", spec.node_rank);
    throw;
  }
}

void interrupt_cluster(int signal_number) { g_interrupted.store(signal_number); }

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = interrupt_cluster;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

}  // namespace libai::actors
