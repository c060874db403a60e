// Auto parallel for a model's training (graph.auto_parallel.enabled, LiBai's key): the search of
// schedule/auto_parallel.h over the model's costs on the cluster's devices, and what `libai-actor
// plan` prints of it.
//
//   AutoParallelSetup setup = auto_parallel_setup(cfg, hf, "gpt2/");   // cluster, batch, keys
//   auto devices = auto_parallel_devices(cfg, setup);                   // measured, calibrated
//   schedule::TrainCostModel costs = auto_parallel_costs(setup, devices);
//   schedule::SearchResult r = search_train_layouts(setup, costs);
//   print_auto_parallel(std::cout, setup, r);                           // chosen + next + why not
//
// The cluster is train.cluster.nodes x train.cluster.devices_per_node devices, the batch
// train.global_batch_size samples of data.seq_length tokens. Each of these keys, when the config
// sets it, fixes its dimension (a constraint); the search varies the others:
//   train.dist.data_parallel_size, tensor_parallel_size, pipeline_parallel_size,
//   pipeline_schedule, virtual_pipeline_size, train.train_micro_batch_size,
//   train.zero_optimization.enabled / stage, train.activation_checkpoint.enabled
// train.dist.balance (null: uniform and measured splits both searched; memory is refused) and
// train.dist.custom_pipeline_stage_id (must be null) concern the split.
// Costs (Note [Auto parallel costs of a model] in auto_parallel.cc): per layer the model's flops
// and bytes per sample (models/stages/stage.h layer_costs), calibrated on each device by one
// timed layer as the training plans are (plan/train_plan.h); the links from
// graph.auto_parallel.intra_node / inter_node ({bandwidth_gbs, latency_seconds}); what they leave
// null is probed (Note [The link probe]): inside a node, two ranks of this process all-reducing;
// between nodes, what the cluster measured as it formed (`train`: the control plane's hop and
// bandwidth, Note [The control plane's bandwidth]) or, for `plan` and one node, a tenth of that
// bandwidth and train.cluster.remote_hop_seconds (else the probed latency).
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/train_plan.h"
#include "schedule/auto_parallel.h"

namespace libai::plan {

struct AutoParallelSetup {
  ModelTrainShape base;  // the config's model, sequence length, balance, threads
  schedule::SearchSpace space;
  schedule::LinkModel intra_node, inter_node;
  bool links_measured = false;  // not given in the config
  bool inter_node_measured = false;  // the bandwidth between nodes measured by the cluster
  double backward_factor = 2;   // backward / forward of the timed layer (auto_parallel_devices)
  // The part of a layer's time at micro-batch 1 that does not grow with the micro-batch
  // (auto_parallel_devices; Note [Auto parallel costs of a model]), and the second size timed.
  double overhead_fraction = 0;
  int64_t overhead_timed_at = 0;  // 0: not fitted (the micro-batch size is fixed)
};

// InvalidArgument naming the key for a cluster or batch the search cannot use.
AutoParallelSetup auto_parallel_setup(const config::Config& cfg, const models::HfConfig& model,
                                      const std::string& model_name);

// The link between two ranks of this process (Note [The link probe]).
schedule::LinkModel probe_local_link();

// The shape each device is measured with for the search: every device of the cluster a replica
// of one device, no recomputation, the config's micro-batch size or 1.
ModelTrainShape auto_parallel_profiling_shape(const config::Config& cfg,
                                              const AutoParallelSetup& setup);

// Fills what measurement gives of `setup` from `profiles` (every device of the cluster, measured
// with auto_parallel_profiling_shape): the fixed per-micro-batch overhead (the layer timed
// again on this process's cpu:0), the rates calibrated by each device's timed layer, the
// backward factor, and the links the config leaves unset (probed here; between nodes the
// latency is `remote_hop_seconds` and the bandwidth `inter_node_bandwidth_gbs` when a cluster
// measured them, > 0: Note [The control plane's bandwidth] in actors/cluster/cluster_node.h).
void calibrate_auto_parallel(const config::Config& cfg, AutoParallelSetup& setup,
                             std::vector<DeviceProfile>& profiles,
                             double remote_hop_seconds = 0, double inter_node_bandwidth_gbs = 0);

// Every device of the cluster as if each node were this one (cpu:0 measured once, one layer
// timed at the config's micro-batch size, or 1), named node<k>:cpu:<d>, with
// train.cluster.profiles' overrides and train.cluster.device_slowdown, calibrated
// (calibrate_auto_parallel): what `plan` searches over.
std::vector<DeviceProfile> auto_parallel_devices(const config::Config& cfg,
                                                       AutoParallelSetup& setup);

schedule::TrainCostModel auto_parallel_costs(const AutoParallelSetup& setup,
                                             const std::vector<DeviceProfile>& devices);

schedule::SearchResult search_train_layouts(const AutoParallelSetup& setup,
                                            const schedule::TrainCostModel& costs);

// The config's shape with `choice`'s layout (what `train` would run).
ModelTrainShape shape_of(const AutoParallelSetup& setup, const schedule::ParallelChoice& choice);
// The command-line overrides that run `choice`: "train.dist.data_parallel_size=2", ...
std::vector<std::string> choice_overrides(const schedule::ParallelChoice& choice);

// The whole search: the setup, the devices, the cost model and the ranking.
struct AutoParallelRun {
  AutoParallelSetup setup;
  std::vector<DeviceProfile> devices;
  schedule::TrainCostModel costs;
  schedule::SearchResult result;
};
// As `plan` runs it: every node like this one (auto_parallel_devices).
AutoParallelRun run_auto_parallel(const config::Config& cfg, const models::HfConfig& model,
                                  const std::string& model_name);
// As `train` runs it on node 0 of a cluster: over the devices every node measured of itself
// (profile_train_devices at auto_parallel_profiling_shape, each node's slow-downs in them) and
// the hop and bandwidth between nodes the cluster measured as it formed (0: one node).
AutoParallelRun run_auto_parallel(const config::Config& cfg, AutoParallelSetup setup,
                                  std::vector<DeviceProfile> measured,
                                  double remote_hop_seconds, double inter_node_bandwidth_gbs = 0);

// `cfg` with the search's choice applied: the chosen layout's keys set (choice_overrides) and
// graph.auto_parallel.enabled false, so that the resolved config written to the output folder
// runs the same layout again. Prints the choice and its prediction to `out`. InvalidArgument
// when no layout fits, with the fastest rejection of each kind.
config::Config chosen_config(const config::Config& cfg, const AutoParallelRun& run,
                             std::ostream& out);
// A node other than 0: its own config with the layout node 0 chose (`planned`, node 0's
// chosen_config as the assignment carries it).
config::Config adopt_chosen_layout(const config::Config& mine, const config::Config& planned);

// The chosen layout and the next `next` candidates with predicted step time, samples/s and
// memory, the rejected ones by reason (memory, the planner's errors) with the fastest of each,
// and the exclusions; then the keys to set.
void print_auto_parallel(std::ostream& out, const AutoParallelSetup& setup,
                         const schedule::SearchResult& result, int next = 5);
nlohmann::json auto_parallel_json(const AutoParallelSetup& setup,
                                  const schedule::SearchResult& result);

}  // namespace libai::plan
