// Serving a model from a job config over the nodes of a cluster: the entry point for a C++
// service that joins a cluster (docs/SERVICE.md, "Over a cluster"). No CAF in sight.
//
//   libai::actors::ServeClusterOptions o{.config = "configs/pipeline_serve.yaml"};
//   o.cluster.node_rank = rank;                       // or the launcher's environment
//   libai::actors::serve_cluster(o, [](libai::Service& svc) {
//     ... svc.generate(...) from any thread, until this function returns ...
//   });
//
// Every node calls serve_cluster with the same config (job._target_: serve, Note [Serve jobs]
// in actors/jobs/config_job.cc). Node 0 plans the split, every node loads its stages, then node 0
// calls `serve` with a libai::Service whose generation runs through the stages, continuously
// batched in lanes (Note [Lanes] in service/batcher.h). When `serve` returns, the running
// requests end, every stage finishes and serve_cluster returns on every node; the other nodes
// never call `serve`. A node that dies or hangs fails the job: the service's failure() says
// so and its requests fail, and serve_cluster throws the job's error once `serve` returns.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/cluster_env.h"
#include "service/service.h"

namespace libai::actors {

struct ServeClusterOptions {
  std::filesystem::path config;        // a job config whose job._target_ is serve
  std::vector<std::string> overrides;  // key=value, as on the command line
  ClusterFlags cluster;                // flags win over the environment and train.cluster.*
};

void serve_cluster(const ServeClusterOptions& options, const std::function<void(Service&)>& serve);

}  // namespace libai::actors
