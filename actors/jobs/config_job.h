// The job a run config describes (plan/run_job.h: its keys, shape and devices), run as a
// ClusterJob: what `libai-actor run CONFIG` runs on every node. Node 0 plans it
// (plan/run_plan.h), every node builds its slots from the assignment, and node 0 drives the
// groups through the pipeline and keeps the results.
//
//   ConfigJob job(cfg, nodes);
//   ClusterResult r = run_cluster(spec, job, cluster_options(cfg));
//   job.print_results(std::cout, /*json=*/false);   // node 0
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "actors/cluster/cluster.h"
#include "plan/run_job.h"
#include "plan/run_plan.h"
#include "runtime/config/config.h"
#include "schedule/plan.h"
#include "service/service.h"

namespace libai::actors {

using plan::JobKind;
using plan::JobShape;

class ConfigJob : public plan::RunJob, public ClusterJob {
 public:
  // See RunJob: InvalidArgument naming the key for a job this runtime cannot run.
  ConfigJob(const config::Config& cfg, int nodes);

  std::vector<wire::DeviceProfile> profile_devices(int node_rank) override;
  void plan(wire::Assignment& assignment) override;
  PipelineLayout layout(const wire::Assignment& assignment) override;
  ComputeFactory compute(const PipelineLayout& layout, const wire::Assignment& assignment) override;
  void drive(PipelineClient& client, const PipelineLayout& layout) override;
  std::optional<TrainPrograms> train_programs(const wire::Assignment& assignment) override;
  TrainComputeFactory train_compute(const PipelineLayout& layout, const wire::Assignment& assignment,
                                    const std::shared_ptr<comm::Communicator>& data_plane) override;
  void train(TrainClient& client, const PipelineLayout& layout) override;
  const std::vector<TrainStepResult>& train_results() const { return train_results_; }

  // A serve job: what node 0 does with the pipeline's service; the job ends when it returns.
  void set_server(std::function<void(Service&)> server) { server_ = std::move(server); }
  // The plan plan() chose (node 0, after plan()); InvalidArgument before.
  const schedule::Plan& chosen_plan() const;
  // graph.auto_parallel.enabled: RunJob::search_layout over the assignment's devices and hops.
  // plan() calls it on node 0.
  using plan::RunJob::search_layout;
  std::string search_layout(const wire::Assignment& assignment);
  // After drive() on node 0: the results, printed as text or one JSON document.
  void print_results(std::ostream& out, bool json) const;
  // The chosen plan (print_job_plan): split, devices, memory, predicted timeline, throughput.
  void print_plan(std::ostream& out, const wire::Assignment& assignment) const;
  // Generated token ids (new tokens), per prompt and returned sequence: for tests.
  const std::vector<std::vector<std::vector<int64_t>>>& generated() const { return generated_; }
  const std::vector<std::vector<float>>& embeddings() const { return embeddings_; }

 private:
  void choose_stage_precision(wire::Assignment& assignment);  // node 0's plan(), auto
  // The precision of each stage (of a job with precisions per slot), by the assignment's slots.
  std::vector<ops::WeightPrecision> precision_of_stages(const wire::Assignment& assignment) const;

  std::function<void(Service&)> server_;
  std::optional<JobShape> shape_;       // node 0, after plan()
  std::optional<schedule::Plan> plan_;  // node 0, after plan()
  std::vector<TrainStepResult> train_results_;
  // Results (node 0).
  std::vector<std::vector<std::vector<int64_t>>> generated_;
  std::vector<std::vector<float>> embeddings_;
  std::vector<std::string> generated_text_;
};

}  // namespace libai::actors
