// `libai-actor train CONFIG` with graph.enabled: true: a real model trained through training
// stage actors (actors/jobs/model_train.h), in this process (LocalTrainPipeline) or over a cluster
// of node processes (every node runs the same command with its NODE_RANK, as `libai-actor
// run` does; actors/cluster/cluster.h forms it and ends the job on every node when one fails).
//
//   train::TrainResult r = run_graph_training(cfg, flags, spec);   // on every node
//
// Layout: train.dist.{data,tensor,pipeline}_parallel_size slots over the cluster's nodes,
// slot i on node i / (slots / nodes) (tensor-parallel ranks share a node); the layers split
// over pipeline_parallel_size x virtual_pipeline_size virtual stages by node 0's plan
// (plan/train_plan.h: train.dist.balance uniform, measured or memory over the devices every
// node profiled, train.cluster.device_slowdown emulated; custom_pipeline_stage_id wins, and a
// family without costs splits uniformly), whose order of devices along the pipeline the layout
// follows; train.dist.pipeline_schedule's programs with
// num_accumulation_steps micro-batches. train.cluster.device_threads compute threads per slot.
// graph.auto_parallel.enabled: the layout is the search's (plan/auto_parallel.h; Note [Auto
// parallel on a cluster] in model_train_job.cc): every node measures its devices for it, node
// 0 searches and its assignment carries the chosen keys to the others.
// Node 0 runs the trainer's loop (train/step_runner.h: logging, metrics.json, TensorBoard, the
// loss curve) with a runner whose steps go through the train driver; the losses equal eager
// training's on one device (Note [Micro-batch order]). Checkpoints, --resume and evaluation
// are controls the driver runs on every slot between steps (Note [Graph-mode checkpoints] in
// model_train_control.cc): the whole model in the eager runners' format, written by world
// rank 0, read by every slot from train.output_dir (which every node must see).
#pragma once

#include "plan/auto_parallel.h"
#include "actors/cluster/cluster.h"
#include "actors/jobs/model_train.h"
#include "plan/train_plan.h"
#include "runtime/cluster_env.h"
#include "runtime/config/config.h"
#include "train/trainer.h"

namespace libai::actors {

using plan::AutoParallelRun;
using plan::AutoParallelSetup;
using plan::ModelTrainShape;

// What a graph-mode training config asks for (InvalidArgument naming the key otherwise).
struct GraphTrainSettings {
  int dp = 1, tp = 1, pp = 1, chunks = 1, threads = 1;
  std::string schedule = "1f1b";
  int64_t train_iter = 0, log_period = 20;
  train::TrainConfig train;  // schedule.max_iter set
  models::HfConfig model_config;
  std::filesystem::path weights;
  std::vector<models::StageSpec> virtual_stages;  // pp x chunks, in virtual-stage order
  std::vector<int64_t> stage_of;                  // [layer] its virtual stage
};
GraphTrainSettings graph_train_settings(const config::Config& cfg, int nodes);

// The parts of the virtual stages of `stage_of` ([layer] virtual stage, contiguous, every one of
// the `virtual_stages` with a layer); InvalidArgument otherwise.
std::vector<models::StageSpec> virtual_stage_specs(const std::vector<int64_t>& stage_of,
                                                   int virtual_stages);

// The job's training data as every node reads it (train/data_config.h, the cyclic sampler of
// Note [Global sample order]).
MicroBatchSource make_micro_batch_source(const config::Config& cfg, const GraphTrainSettings& s);

// Every slot's validation micro-batches when the run evaluates (train.evaluation.enabled or
// --eval-only; train/step_runner.h's validation_micro_batches of the loop's splits); null
// otherwise or when the data has no validation split.
using ValidationSource = std::function<std::vector<models::TensorMap>(int replica)>;
ValidationSource make_validation_source(const config::Config& cfg, const train::TrainerFlags& flags,
                                        const GraphTrainSettings& s);

// The training job as the cluster runs it (node 0 drives the steps through train()).
class ModelTrainJob : public ClusterJob {
 public:
  ModelTrainJob(const config::Config& cfg, const ClusterSpec& spec,
                const train::TrainerFlags& flags);
  std::vector<wire::DeviceProfile> profile_devices(int node_rank) override;
  void plan(wire::Assignment& assignment) override;
  PipelineLayout layout(const wire::Assignment& assignment) override;
  ComputeFactory compute(const PipelineLayout&, const wire::Assignment&) override;
  void drive(PipelineClient&, const PipelineLayout&) override {}
  std::optional<TrainPrograms> train_programs(const wire::Assignment&) override;
  TrainComputeFactory train_compute(const PipelineLayout& layout, const wire::Assignment& assignment,
                                    const std::shared_ptr<comm::Communicator>& data_plane) override;
  void train(TrainClient& client, const PipelineLayout& layout) override;

  const GraphTrainSettings& settings() const { return settings_; }
  train::TrainResult& result() { return result_; }
  // Node 0, after plan(): the training plan (none for a family without costs or a custom
  // split over chunks).
  const std::optional<schedule::Plan>& chosen_plan() const { return plan_; }
  const ModelTrainShape& shape() const { return shape_; }

 private:
  // Settings and shape from cfg_ (once the layout is known).
  void configure();
  // The search's layout (`chosen`: auto parallel off) as this node's config, then configure().
  void adopt(const config::Config& chosen);

  config::Config cfg_;
  std::optional<AutoParallelSetup> search_;  // set until the search's layout is adopted
  ClusterSpec spec_;
  train::TrainerFlags flags_;
  GraphTrainSettings settings_;
  int per_node_ = 1;
  ModelTrainShape shape_;
  std::optional<schedule::Plan> plan_;
  std::string plan_text_;  // logged when the first step or evaluation starts
  train::TrainResult result_;
};

// On every node; node 0 returns the run's result (other nodes: theirs, without losses).
train::TrainResult run_graph_training(const config::Config& cfg, const train::TrainerFlags& flags,
                                      const ClusterSpec& spec);

}  // namespace libai::actors
