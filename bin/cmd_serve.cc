// `libai-actor serve --model DIR [--host H] [--port N] [--threads N] [--max-batch N]`: the
// OpenAI-style HTTP server of docs/SERVER.md over one model folder, until SIGINT or SIGTERM,
// which end it cleanly (exit 0): open streams are cancelled, the service drains, the port is
// released. Prints "serving NAME on http://HOST:PORT" on stdout once it accepts requests (with
// the chosen port for --port 0).
//
// `libai-actor serve CONFIG [key=value ...] [--nodes N --node-rank R --addr A --cluster-port P
// --token T] [--host H] [--port N]`: the same server over pipeline stages on the nodes of a
// cluster (job._target_: serve; actors/jobs/cluster_service.h). Run it on every node; node 0
// serves HTTP, the others run their stages until node 0 stops. A node that dies or hangs ends
// node 0's server with the job's error (exit 1).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "actors/cluster/cluster.h"
#include "actors/jobs/cluster_service.h"
#include "bin/commands.h"
#include "bin/model_args.h"
#include "app/schema.h"
#include "runtime/error.h"
#include "service/http_server.h"
#include "service/service.h"

namespace libai::cli {
namespace {

struct ServeOptions {
  std::string config;
  std::vector<std::string> overrides;
  ClusterFlags cluster;
  std::string model;
  std::string name;
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 0;
  int max_batch = 16;
  int max_queue = 256;
  size_t max_body_bytes = 1 << 20;
  bool no_pack = false;
  std::string packed_dtype = "f32";
  std::string quantize = "none";
  std::vector<std::string> quantize_keep;
};

// Note [Stopping the server]: SIGINT and SIGTERM set a flag that the serving thread polls.
// Blocking them in every thread and waiting with sigwait is not enough: libraries start
// threads before main (OpenBLAS's pool) with the signals unblocked, and the kernel may pick one
// of those, whose default action ends the process at once.
std::atomic<int> g_stop_signal{0};

extern "C" void on_stop_signal(int signal_number) { g_stop_signal.store(signal_number); }

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not the end of us
}

// Until a stop signal (then logs it) or until `failure` says something (then returns it).
std::string serve_until_stopped(const std::function<std::string()>& failure) {
  while (true) {
    if (const int s = g_stop_signal.load()) {
      std::fprintf(stderr, "[serve] %s: stopping\n", s == SIGINT ? "SIGINT" : "SIGTERM");
      return {};
    }
    if (failure) {
      std::string why = failure();
      if (!why.empty()) return why;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

HttpServerOptions server_options(const ServeOptions& o, const std::string& model_dir) {
  HttpServerOptions options;
  options.model_dir = model_dir;
  options.model_name = o.name;
  options.host = o.host;
  options.port = o.port;
  options.max_batch = o.max_batch;
  options.max_body_bytes = o.max_body_bytes;
  return options;
}

// Node 0 of a serve job: the HTTP server over the cluster's service until a stop signal, or
// until the job fails (then the failure is the command's error).
int serve_cluster_node(const ServeOptions& o) {
  const config::Config cfg = config::load_libai_config(o.config, o.overrides, {});
  const ClusterSpec spec = resolve_cluster(o.cluster, &cfg);
  actors::ServeClusterOptions options{.config = o.config, .overrides = o.overrides, .cluster = o.cluster};
  if (spec.node_rank != 0) {
    actors::install_interrupt_handlers();  // the others end the job, as `libai-actor run` does
    actors::serve_cluster(options, [](Service&) {});
    std::printf("node %d: done\n", spec.node_rank);
    return kExitOk;
  }
  install_stop_handlers();
  std::string failure;
  actors::serve_cluster(options, [&](Service& service) {
    HttpServerOptions http = server_options(o, cfg.get_or<std::string>("model.weights", ""));
    http.max_batch = cfg.get_or<int>("job.max_batch", 16);
    HttpServer server(service, http);
    server.start();
    std::printf("serving %s on http://%s:%d\n", server.model_name().c_str(), o.host.c_str(),
                server.port());
    std::fflush(stdout);
    failure = serve_until_stopped([&] { return service.failure(); });
    server.stop();
  });
  LIBAI_CHECK_KIND(CommunicationError, failure.empty(), failure);
  return kExitOk;
}

int serve(const ServeOptions& o) {
  if (!o.config.empty()) {
    LIBAI_CHECK(o.model.empty(), "serve: give a CONFIG or --model DIR, not both");
    LIBAI_CHECK(o.quantize == "none" && o.quantize_keep.empty(),
                "serve: --quantize applies to --model DIR; a CONFIG's cluster job says "
                "model.quantize (and model.quantize_keep) instead");
    LIBAI_CHECK(o.port >= 0 && o.port < 65536, "serve: --port must be in [0, 65535], got ", o.port);
    try {
      return serve_cluster_node(o);
    } catch (const Error& e) {
      // Stage threads of this node may still be tied to a dead peer: end the process now.
      std::fprintf(stderr, "libai-actor serve: error: %s\n", e.what());
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(kExitError);
    }
  }
  LIBAI_CHECK(o.overrides.empty(), "serve: key=value overrides need a CONFIG");
  LIBAI_CHECK(!o.model.empty(), "serve: give --model DIR (a Hugging Face model folder)");
  LIBAI_CHECK(o.port >= 0 && o.port < 65536, "serve: --port must be in [0, 65535], got ", o.port);
  install_stop_handlers();

  ServiceOptions service_options;
  service_options.model_dir = o.model;
  service_options.threads = o.threads;
  service_options.max_batch = o.max_batch;
  service_options.max_queue = o.max_queue;
  service_options.pack_weights = !o.no_pack;
  service_options.bf16_weights = parse_dtype_flag(o.packed_dtype, "--packed-dtype") == DType::bf16;
  LIBAI_CHECK(!service_options.bf16_weights || service_options.pack_weights,
              "--packed-dtype bf16 needs packed weights (drop --no-pack-weights)");
  service_options.quantize = o.quantize;
  service_options.quantize_keep = o.quantize_keep;
  const bool quantized = ops::parse_quantization(o.quantize, "--quantize").kind !=
                         ops::Quantization::none;
  LIBAI_CHECK(!quantized || service_options.pack_weights, "--quantize ", o.quantize,
              " needs packed weights (drop --no-pack-weights)");
  LIBAI_CHECK(!quantized || !service_options.bf16_weights, "--quantize ", o.quantize,
              " and --packed-dtype bf16 exclude each other");
  LIBAI_CHECK(quantized || o.quantize_keep.empty(), "--quantize-keep needs --quantize");
  auto service = Service::open(service_options);

  HttpServer server(*service, server_options(o, o.model));
  server.start();
  std::printf("serving %s on http://%s:%d\n", server.model_name().c_str(), o.host.c_str(),
              server.port());
  std::fflush(stdout);

  serve_until_stopped({});
  server.stop();
  service.reset();
  return kExitOk;
}

}  // namespace

CommandAction setup_serve(CLI::App& command) {
  auto o = std::make_shared<ServeOptions>();
  command.add_option("CONFIG", o->config, "a serve job config (job._target_: serve) for a cluster");
  command.add_option("overrides", o->overrides, "KEY=VALUE overrides of the CONFIG");
  command.add_option("--nodes", o->cluster.nodes, "number of nodes (overrides NODE / NNODES)");
  command.add_option("--node-rank", o->cluster.node_rank, "this node's rank (overrides NODE_RANK)");
  command.add_option("--addr", o->cluster.addr, "node 0's address (overrides ADDR / MASTER_ADDR)");
  command.add_option("--cluster-port", o->cluster.port,
                     "node 0's cluster port (overrides PORT / MASTER_PORT; --port is HTTP's)");
  command.add_option("--token", o->cluster.token, "the cluster token (overrides LIBAI_CLUSTER_TOKEN)");
  command.add_option("--model", o->model, "model folder (config.json, weights, tokenizer) or GGUF file");
  command.add_option("--served-model-name", o->name,
                     "the name clients pass as `model` (default: the folder's name)");
  command.add_option("--host", o->host, "address to listen on")->capture_default_str();
  command.add_option("--port", o->port, "port (0: any free one, printed)")->capture_default_str();
  command.add_option("--threads", o->threads, "compute threads (0: all cores)")
      ->capture_default_str();
  command.add_option("--max-batch", o->max_batch,
                     "sequences decoded together (--model; a CONFIG's is job.max_batch)")
      ->capture_default_str();
  command.add_option("--max-queue", o->max_queue, "requests waiting beyond the running ones")
      ->capture_default_str();
  command.add_flag("--no-pack-weights", o->no_pack,
                   "do not pack the weights for the CPU's inference kernel (--model; saves a copy "
                   "of the linear weights' memory)");
  command.add_option("--packed-dtype", o->packed_dtype,
                     "dtype of the packed weight copies (--model): f32, or bf16 (rounds the "
                     "linear and output weights to bf16: half the bytes per decoded token)")
      ->capture_default_str();
  add_quantize_flags(command, o->quantize, o->quantize_keep);
  command.add_option("--max-body-bytes", o->max_body_bytes, "larger request bodies get 413")
      ->capture_default_str();
  return [o] { return serve(*o); };
}

}  // namespace libai::cli
