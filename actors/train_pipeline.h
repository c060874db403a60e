// Training pipelines of stage actors: the routes between training stages (per model chunk,
// both directions), the train driver that starts each step on every stage and gathers their
// summaries, and a whole training pipeline in one process (LocalTrainPipeline). The cluster
// (actors/cluster/cluster.h) builds the same across node processes.
//
//   PipelineLayout layout = make_train_layout({.dp = 2, .pp = 4, .tp = 1});
//   TrainPrograms programs{schedule::one_f_one_b(4, 8), 1};
//   LocalTrainPipeline pipeline(system, layout, programs, [&](const SlotSpec& slot) { ... });
//   TrainStepResult r = pipeline.client().run_step(0);   // blocks; r.total.loss_sum, ...
//   std::vector<wire::StageReport> reports = pipeline.finish();
//
// Routes: the slots are PipelineLayout's (replica r, device d, tp rank t). Virtual stage
// c * pp + d is chunk c of device d (Note [Training packets] in train_stage_actor.h); rank t
// sends its activations to rank t of the next virtual stage of its replica and its gradients
// to rank t of the previous one: every rank of a stage gets the same packets.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/pipeline.h"
#include "actors/train_stage_actor.h"
#include "schedule/train_programs.h"

namespace libai::actors {

// A training job's programs, and the schedules by name (schedule/train_programs.h).
using schedule::TrainPrograms;
using schedule::train_programs;

// Checks that `programs` fits `layout` (one program per device, chunks in range, every
// (micro-batch, chunk) forwarded and backwarded once per device); throws InvalidArgument.
void check_train_programs(const PipelineLayout& layout, const TrainPrograms& programs);

// The layout of a training job: make_layout's slots (its groups and quotas are unused).
PipelineLayout make_train_layout(LayoutSizes sizes);

// The channel of the link into slot `slot`'s chunk `chunk`, one per direction.
std::uint32_t train_channel(int slot, int chunk, bool gradient, int chunks);

using TrainComputeFactory = std::function<std::shared_ptr<TrainStageCompute>(const SlotSpec&)>;

// Spawns `node`'s training stages; with a message plane, the node's inbox learns each stage's
// channels (activations and gradients in, credits for its activations out).
std::vector<caf::actor> spawn_train_slots(caf::actor_system& system, const PipelineLayout& layout,
                                          const TrainPrograms& programs, int node,
                                          const TrainComputeFactory& make_compute,
                                          const NodePlane& plane, caf::actor parent,
                                          const TraceFn& trace = {},
                                          ProgressBoard* progress = nullptr);

// Gives `node`'s training stages their routes (and, on node 0, the driver its stages).
void connect_train_slots(const PipelineLayout& layout, const TrainPrograms& programs, int node,
                         const std::vector<caf::actor>& handles, const caf::actor& driver);

struct TrainStepResult {
  int step = 0;
  std::vector<StepSummary> slots;  // by layout slot
  StepSummary total;               // merge_summaries(slots)
  double seconds = 0;              // from the step's start to its last summary
};

// Losses, counts and extras summed over stages; the largest norm; skipped if any skipped.
StepSummary merge_summaries(const std::vector<StepSummary>& summaries);

// Where a training job's steps are started and their results collected: thread-safe, no CAF
// in sight. The job thread calls run_step(k) for each step, then finish().
class TrainClient {
 public:
  // Starts step `step` on every stage and waits for every stage's summary. Throws
  // CommunicationError with the job's failure when the job failed first or meanwhile, or
  // when the step takes longer than `timeout` (the job then fails with that).
  TrainStepResult run_step(int step, std::chrono::milliseconds timeout = std::chrono::minutes(10));
  // Runs `command` on every stage between steps (Note [Train controls] in
  // train_stage_actor.h) and waits for every stage's answer (result.step: kControlStep), with
  // run_step's errors.
  static constexpr int kControlStep = -1;
  TrainStepResult run_control(const wire::TrainControl& command,
                              std::chrono::milliseconds timeout = std::chrono::minutes(10));
  // Tells every stage that the job is over (each then reports to its parent).
  void finish();
  void fail(const std::string& reason);
  bool failed() const;
  std::string failure() const;  // empty while none

  // For the driver actor.
  void attach(caf::actor driver);
  void deliver(TrainStepResult result);

 private:
  TrainStepResult exchange(int step, const std::string& what, const caf::message& message,
                           std::chrono::milliseconds timeout);

  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  caf::actor driver_;
  std::optional<TrainStepResult> result_;
  std::string failure_;
};

// The driver starts without stages; (routes_atom, TrainDriverStagesPtr) gives them.
using TrainDriverStagesPtr = std::shared_ptr<const std::vector<caf::actor>>;
caf::actor spawn_train_driver(caf::actor_system& system, std::shared_ptr<TrainClient> client);

// A whole training pipeline in this process.
class LocalTrainPipeline {
 public:
  LocalTrainPipeline(caf::actor_system& system, PipelineLayout layout, TrainPrograms programs,
                     const TrainComputeFactory& make_compute, const TraceFn& trace = {});
  ~LocalTrainPipeline();
  TrainClient& client() { return *client_; }
  // Ends the job after its last step: every stage reports. Throws the first stage's error
  // (after stopping the others) or a CommunicationError after `timeout`.
  std::vector<wire::StageReport> finish(std::chrono::milliseconds timeout = std::chrono::minutes(10));

  struct Outcome;

 private:
  void stop_all();
  caf::actor_system& system_;
  PipelineLayout layout_;
  std::shared_ptr<TrainClient> client_;
  std::shared_ptr<Outcome> outcome_;
  caf::actor supervisor_;
  caf::actor driver_;
  std::vector<caf::actor> stages_;
  bool finished_ = false;
};

}  // namespace libai::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(libai::actors::TrainDriverStagesPtr)
