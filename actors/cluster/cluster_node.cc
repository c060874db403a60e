#include "actors/cluster/cluster_node.h"

#include "runtime/comm/shm_communicator.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "runtime/config/config.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::actors {

using namespace std::chrono_literals;

namespace cluster {

namespace {

std::atomic<int> g_interrupted{0};

}  // namespace

int interrupted_signal() { return g_interrupted.load(); }

std::string hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string stages_of_node(const PipelineLayout& layout, int node) {
  std::string out;
  for (const SlotSpec& slot : layout.slots)
    if (slot.node == node) out += (out.empty() ? "" : ", ") + slot.name();
  return out.empty() ? "no stages" : out;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  return str_cat(double(ms.count()) / 1000.0, " s");
}

Node::Node(const ClusterSpec& s, ClusterJob& j, const ClusterOptions& o)
    : spec(s), job(j), options(o) {
  configure_actor_system(config);
  system = std::make_unique<caf::actor_system>(config);
  self = std::make_unique<caf::scoped_actor>(*system);
}

void Node::set_data_plane(std::shared_ptr<comm::Communicator> communicator) {
  data_plane = std::move(communicator);
  plane = start_node_plane(data_plane, options.setup_timeout,
                           [me = caf::actor{me()}](const std::string& error) {
                             caf::anon_send(me, failed_atom::value, error);
                           });
}

void Node::abort_data_planes(const std::string& reason) {
  if (data_planes_aborted) return;
  data_planes_aborted = true;
  try {
    if (plane) plane.plane->abort(reason);  // first: it may run over the communicator
    if (data_plane) data_plane->abort(reason);
  } catch (const std::exception& e) {
    logger("cluster")->debug("{}: aborting the data plane: {}", who(), e.what());
  }
}

void Node::stop_local_stages(const std::string& reason) {
  abort_data_planes(reason);
  for (auto& stage : stages)
    if (stage) caf::anon_send(stage, abort_atom::value, reason);
  // The train driver's stop would ask the stages to end normally: abort it instead.
  if (driver && training)
    caf::anon_send(driver, abort_atom::value);
  else if (driver)
    caf::anon_send(driver, stop_atom::value);
}

std::vector<caf::actor> Node::spawn_stages(const wire::Assignment& assignment, int rank) {
  training = job.train_programs(assignment);
  if (training)
    return spawn_train_slots(*system, layout, *training, rank,
                             job.train_compute(layout, assignment, data_plane), plane,
                             caf::actor{me()}, {}, &progress);
  return spawn_slots(*system, layout, rank, job.compute(layout, assignment), plane,
                     caf::actor{me()}, {}, &progress);
}

void Node::connect_stages(int rank, const std::vector<caf::actor>& handles,
                          const caf::actor& to_driver) {
  if (training)
    connect_train_slots(layout, *training, rank, handles, to_driver);
  else
    connect_slots(layout, rank, handles, to_driver);
}

void Node::check_interrupt() {
  if (const int sig = g_interrupted.load())
    LIBAI_THROW(CommunicationError, who(), " was interrupted (signal ", sig, ")");
}

std::string choose_transport(const std::string& wanted, const std::vector<std::string>& host_keys) {
  LIBAI_CHECK(wanted == "auto" || wanted == "shm" || wanted == "ucx",
              "train.cluster.transport must be auto, shm or ucx, got '", wanted, "'");
  if (wanted == "ucx") return wanted;
  std::string apart;  // the nodes that cannot share node 0's memory
  for (size_t k = 0; k < host_keys.size(); ++k)
    if (host_keys[k].empty() || host_keys[k] != host_keys[0])
      apart += (apart.empty() ? "" : ", ") + std::to_string(k);
  if (apart.empty()) return "shm";
  LIBAI_CHECK(wanted == "auto", "train.cluster.transport is shm, but node(s) ", apart,
              " cannot share memory with node 0 (another host, or other IPC/PID namespaces): "
              "use ucx or auto");
  return "ucx";
}

std::shared_ptr<comm::Communicator> open_data_plane(const std::string& transport,
                                                    comm::UcxGroupOptions options,
                                                    const std::function<void()>& watch,
                                                    const std::function<void(int)>& on_port) {
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
  std::thread([shared, options, transport] {
    std::shared_ptr<comm::Communicator> comm;
    std::exception_ptr error;
    try {
      comm = transport == "shm" ? comm::make_shm_communicator(options)
                                : comm::make_ucx_communicator(options);
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
      shared->changed.wait_for(lock, 10ms,
                               [&] { return shared->done || (!told_port && shared->port >= 0); });
      if (!told_port && shared->port >= 0 && on_port) {
        const int port = shared->port;
        told_port = true;
        lock.unlock();
        on_port(port);
        continue;
      }
      if (shared->done) {
        if (shared->error) std::rethrow_exception(shared->error);
        // Moved out, not copied: the UCX communicator's executor thread holds a copy of
        // `options`, whose on_listening holds `shared`; a copy left here is a cycle that keeps
        // the communicator, its thread and its UCX worker alive past the run's end
        // (LeakSanitizer reported UCX's blocks at exit: tools/lsan.supp).
        return std::move(shared->comm);
      }
    }
    watch();
  }
}

}  // namespace cluster

ClusterResult run_cluster(const ClusterSpec& spec, ClusterJob& job, const ClusterOptions& options) {
  auto node = std::make_unique<cluster::Node>(spec, job, options);
  try {
    ClusterResult result =
        spec.node_rank == 0 ? cluster::run_node0(*node) : cluster::run_agent(*node);
    return result;
  } catch (...) {
    // Note [Aborting the data planes]: threads blocked on a peer wake now.
    std::string reason = "the job failed";
    try {
      throw;
    } catch (const std::exception& e) {
      reason = e.what();
    } catch (...) {
    }
    node->abort_data_planes(reason);
    // A stage's thread may still be in a long action (or on a data plane that has no abort):
    // tear the node down on another thread and give up on it after 2 s, so that the error
    // reaches the caller at once. An abandoned node's threads end with the process.
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    std::thread([node = std::move(node), done]() mutable {
      node.reset();
      done->set_value();
    }).detach();
    if (finished.wait_for(2s) != std::future_status::ready)
      logger("cluster")->debug(
          "node {}: teardown after the failure takes over 2 s; leaving it to "
          "the process exit",
          spec.node_rank);
    throw;
  }
}

ClusterOptions cluster_options(const config::Config& cfg) {
  auto ms = [](double seconds) { return std::chrono::milliseconds(int64_t(seconds * 1000)); };
  ClusterOptions options;
  options.join_timeout = ms(cfg.get_or<double>("train.cluster.join_timeout", 60.0));
  options.heartbeat_timeout = ms(cfg.get_or<double>("train.cluster.heartbeat_timeout", 30.0));
  options.transport = cfg.get_or<std::string>("train.cluster.transport", "auto");
  options.config_yaml = cfg.to_yaml();
  return options;
}

void interrupt_cluster(int signal_number) { cluster::g_interrupted.store(signal_number); }

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = interrupt_cluster;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

}  // namespace libai::actors
