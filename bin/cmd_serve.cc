// `libai-actor serve --model DIR [--host H] [--port N] [--threads N] [--max-batch N]`: the
// OpenAI-style HTTP server of docs/SERVER.md over one model folder, until SIGINT or SIGTERM,
// which end it cleanly (exit 0): open streams are cancelled, the service drains, the port is
// released. Prints "serving NAME on http://HOST:PORT" on stdout once it accepts requests (with
// the chosen port for --port 0).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "bin/commands.h"
#include "runtime/error.h"
#include "service/http_server.h"
#include "service/service.h"

namespace libai::cli {
namespace {

struct ServeOptions {
  std::string config;
  std::string model;
  std::string name;
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 0;
  int max_batch = 16;
  int max_queue = 256;
  size_t max_body_bytes = 1 << 20;
};

int serve(const ServeOptions& o) {
  if (!o.config.empty())
    LIBAI_THROW(Unsupported, "serve ", o.config,
                ": serving a job config (a cluster) is not supported yet; serve one model "
                "folder with `serve --model DIR`");
  LIBAI_CHECK(!o.model.empty(), "serve: give --model DIR (a Hugging Face model folder)");
  LIBAI_CHECK(o.port >= 0 && o.port < 65536, "serve: --port must be in [0, 65535], got ", o.port);

  // The signals are taken by this thread alone (sigwait below): block them before any other
  // thread starts, so that every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not the end of us

  ServiceOptions service_options;
  service_options.model_dir = o.model;
  service_options.threads = o.threads;
  service_options.max_batch = o.max_batch;
  service_options.max_queue = o.max_queue;
  auto service = Service::open(service_options);

  HttpServerOptions options;
  options.model_dir = o.model;
  options.model_name = o.name;
  options.host = o.host;
  options.port = o.port;
  options.max_batch = o.max_batch;
  options.max_body_bytes = o.max_body_bytes;
  HttpServer server(*service, options);
  server.start();
  std::printf("serving %s on http://%s:%d\n", server.model_name().c_str(), o.host.c_str(),
              server.port());
  std::fflush(stdout);

  int received = 0;
  sigwait(&stop_signals, &received);
  std::fprintf(stderr, "[serve] %s: stopping\n", received == SIGINT ? "SIGINT" : "SIGTERM");
  server.stop();
  service.reset();
  return kExitOk;
}

}  // namespace

CommandAction setup_serve(CLI::App& command) {
  auto o = std::make_shared<ServeOptions>();
  command.add_option("CONFIG", o->config, "a job config (not supported yet: use --model)");
  command.add_option("--model", o->model, "model folder (config.json, weights, tokenizer)");
  command.add_option("--served-model-name", o->name,
                     "the name clients pass as `model` (default: the folder's name)");
  command.add_option("--host", o->host, "address to listen on")->capture_default_str();
  command.add_option("--port", o->port, "port (0: any free one, printed)")->capture_default_str();
  command.add_option("--threads", o->threads, "compute threads (0: all cores)")
      ->capture_default_str();
  command.add_option("--max-batch", o->max_batch, "sequences decoded together")
      ->capture_default_str();
  command.add_option("--max-queue", o->max_queue, "requests waiting beyond the running ones")
      ->capture_default_str();
  command.add_option("--max-body-bytes", o->max_body_bytes, "larger request bodies get 413")
      ->capture_default_str();
  return [o] { return serve(*o); };
}

}  // namespace libai::cli
