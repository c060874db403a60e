// The trainer's loop and what runs its steps, apart: the loop (data, logging, evaluation
// timing, checkpoint timing, resume, the result) is shared by every way of executing a step;
// a StepRunner executes steps, evaluates and saves/loads checkpoints for one layout and mode.
//
// Runners today (train/trainer.cc): the eager data x tensor parallel ranks (train::TrainStep),
// and the eager SPMD pipeline (train/pipeline_eager.h: train::StageStep per rank with
// blocking sends). Both run one loop per rank, on that rank's thread.
//
// How to plug a runner (e.g. the actor runtime's static plan for graph.enabled true):
//   1. implement StepRunner: run() takes the micro-batches of the replicas this loop feeds
//      and returns the step's StepResult (the same on every caller); evaluate() returns the
//      metrics of the validation micro-batches; save()/load() write and read the existing
//      checkpoint format (whole-model names: a checkpoint loads at any layout);
//   2. call run_training_loop(cfg, flags, role, factory) on the thread that drives the run:
//      `role` says which data-parallel replicas' micro-batches this loop reads (a driver that
//      feeds every replica lists them all) and whether it writes the metrics; `factory` builds
//      the runner once the loop knows the run's length (TrainConfig::schedule.max_iter).
//   The loop calls, in order: factory, load (--resume), then per step run, evaluate (every
//   eval_period), save (every checkpointer.period and model_final / model_best).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/config/config.h"
#include "train/checkpoint/gathered.h"
#include "train/data_config.h"
#include "train/train_config.h"
#include "train/train_step.h"
#include "train/trainer.h"

namespace libai::train {

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // The model's config (data, FLOPs and metric choices follow it) and its task.
  virtual const models::HfConfig& model_config() const = 0;
  virtual models::Task task() const = 0;
  // One optimizer step. batches[i] holds the num_accumulation_steps micro-batches of replica
  // role.replicas[i] (Note [Micro-batch order]). Returns the same result on every caller.
  virtual StepResult run(const std::vector<std::vector<models::TensorMap>>& batches) = 0;
  virtual int64_t steps_done() const = 0;
  // Validation: batches[i] holds replica role.replicas[i]'s validation micro-batches (the same
  // count for every replica). Returns eval/loss and eval/perplexity or eval/accuracy, averaged
  // over the data-parallel replicas (eval_metrics below).
  virtual std::map<std::string, double> evaluate(
      const std::vector<std::vector<models::TensorMap>>& batches) = 0;
  // Writes output_dir/name (train/checkpoint/gathered.h) with `progress`; every caller returns once it
  // is complete.
  virtual void save(const std::filesystem::path& output_dir, const std::string& name,
                    const TrainingProgress& progress, int max_to_keep) = 0;
  // Reads a checkpoint written by any runner at any layout (or refuses clearly); sets
  // steps_done to its iteration.
  virtual TrainingProgress load(const std::filesystem::path& folder) = 0;
};

// Which data the loop reads and who writes the metrics.
struct LoopRole {
  int data_parallel_size = 1;
  std::vector<int> replicas{0};  // the replicas whose micro-batches this loop reads
  bool writer = true;            // console, metrics.json, TensorBoard, loss curve, the result
};

using RunnerFactory = std::function<std::unique_ptr<StepRunner>(const TrainConfig&)>;

// The shared loop, on this thread. Writes `result` when role.writer.
void run_training_loop(const config::Config& cfg, const TrainerFlags& flags, const LoopRole& role,
                       const RunnerFactory& make_runner, TrainResult& result);

// Evaluation metrics from one replica's sums (loss summed over `batches` micro-batches,
// classification: correct of seen), averaged over `dp` (null: one replica).
std::map<std::string, double> eval_metrics(models::Task task, double loss_sum, int64_t batches,
                                           double correct, double seen,
                                           const std::shared_ptr<comm::Communicator>& dp);

// What the loop asks of the data for `train_iter` steps (the validation samples its
// evaluations take), so that a runner reading its own data (graph mode: every stage reads its
// micro-batches) builds the same splits. train_iter: after --fast-dev-run and epochs.
DataNeeds training_data_needs(const config::Config& cfg, const TrainerFlags& flags,
                              const TrainConfig& t, int64_t train_iter, int data_parallel_size);
// One evaluation's micro-batches of replica `replica`: eval_iter (1 under --fast-dev-run) from
// the start of the split, fewer when it ends first; InvalidArgument when it has none.
std::vector<models::TensorMap> validation_micro_batches(const config::Config& cfg,
                                                        const TrainerFlags& flags,
                                                        const data::Dataset& validation,
                                                        int64_t micro_batch_size,
                                                        int data_parallel_size, int replica);

// The model's config of a training config (model.weights/config.json or model.config).
models::HfConfig training_model_config(const config::Config& cfg);

}  // namespace libai::train
