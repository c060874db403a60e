#include "actors/jobs/cluster_service.h"

#include "actors/jobs/config_job.h"
#include "app/schema.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::actors {

void serve_cluster(const ServeClusterOptions& options, const std::function<void(Service&)>& serve) {
  LIBAI_CHECK(serve != nullptr, "serve_cluster: no serve function");
  const config::Config cfg = config::load_libai_config(options.config, options.overrides, {});
  const ClusterSpec spec = resolve_cluster(options.cluster, &cfg);
  set_log_rank(spec.node_rank);
  ConfigJob job(cfg, spec.nodes);
  LIBAI_CHECK(job.serving(), options.config.string(), ": job._target_ is '",
              cfg.get_or<std::string>("job._target_", "train"),
              "', not serve: serve a model folder with Service::open, run other jobs with "
              "`libai-actor run`");
  job.set_server(serve);
  ClusterOptions cluster = cluster_options(cfg);
  // A service runs until it is stopped: no deadline on the job (liveness still watches it).
  cluster.job_timeout = std::chrono::hours(24 * 365 * 10);
  logger("cluster")->info("node {} of {} serves {} (cluster from {})", spec.node_rank, spec.nodes,
                          options.config.string(), spec.source);
  run_cluster(spec, job, cluster);
}

}  // namespace libai::actors
