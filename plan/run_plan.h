// The plan of a config job (actors/jobs/config_job.h), compiled by schedule/: one request for what
// `libai-actor run` runs and what `libai-actor plan` prints, built from the job's shape and
// the devices' profiles (DeviceProfile, in node order: device d of the cluster is node
// d / devices_per_node).
//
//   JobShape shape = job.shape();
//   // plan_request, then schedule::compile_plan:
//   schedule::Plan plan = compile_job_plan(shape, assignment.devices);
//   check_job_plan(plan, assignment.devices, shape.devices_per_node);  // one clear error
//   print_job_plan(std::cout, shape, plan, assignment.devices);
//
// Costs (Note [Decoding costs of a model job] in plan/run_plan.cc):
//   model jobs   per layer and device, the roofline time (schedule::layer_time_from_profile) of
//                the layer's flops and bytes (models/stages/stage.h layer_costs) on the
//                device's measured GFLOP/s and GB/s: a group's prefill (rows x the longest
//                prompt) and, when generating, one decoding step (rows tokens over the mean
//                context, reading weights and KV caches); the embedding on the first stage and
//                the head on the last likewise; weights and the KV cache a group keeps (rows x
//                (prompt + max_new_tokens) tokens) in f32, as the stages load them, or the
//                layers' and head's weights in model.quantize's bytes, or in each pipeline
//                slot's precision (train.dist.stage_precision; its layer timed there).
//   synthetic    job.layer_seconds on the fastest device, times the measured slow-down of the
//                others (fastest GFLOP/s / theirs); no memory.
// Memory caps: each profile's free memory (the host's) divided by the devices of its node.
// The workload: training for synthetic_train (one step of its schedule); decoding for generate
// (num_groups groups of max_new_tokens steps) and for synthetic jobs of job.steps > 1; one
// forward per micro-batch otherwise. Groups are per
// data-parallel replica: the prediction is replica 0's, the one with the most groups.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device_profile.h"
#include "ops/packed_linear.h"
#include "schedule/plan.h"

namespace libai::plan {

enum class JobKind { generate, encode, synthetic };

// What the plan of a config job depends on (ConfigJob::shape()).
struct JobShape {
  JobKind kind = JobKind::synthetic;
  std::filesystem::path model;  // generate, encode: the model folder (config.json is read)
  // model.quantize: the layers' weights are held and read in this precision (Note [Decoding
  // costs of a model job]).
  ops::QuantSpec quantize;
  // train.dist.stage_precision (Note [Precision per pipeline stage] in schedule/precision.h):
  // the precisions priced (each device timed its layer at each: DeviceProfile::timings), and
  // per pipeline slot the index of its own; `auto` leaves slot_precision empty until
  // resolve_stage_precision chooses. No precisions: model.quantize on every slot.
  std::vector<ops::WeightPrecision> precisions;
  std::vector<int> slot_precision;
  bool mixed_precision() const { return !precisions.empty(); }
  int dp = 1, pp = 1, tp = 1, devices_per_node = 1;
  int num_layers = 0;
  int num_groups = 1;          // all replicas: groups (generate), micro-batches (encode, synthetic)
  int steps = 1;               // model calls per group
  double layer_seconds = 0;    // synthetic: per layer and action on the fastest device
  int64_t rows = 1;            // sequences of the largest group or micro-batch (beams included)
  int64_t input_tokens = 1;    // the longest prompt or text, in tokens (with special tokens)
  int64_t max_new_tokens = 0;  // generate
  // synthetic_train (Note [Synthetic training jobs] in config_job.cc): the plan is a training
  // plan of `schedule` (gpipe, 1f1b, interleaved over `chunks` per stage), num_groups
  // micro-batches, backward = backward_factor x forward; layer_seconds is the forward's.
  bool training = false;
  std::string schedule = "1f1b";
  int chunks = 1;
  double backward_factor = 2.0;
  std::string balance = "uniform";                       // train.dist.balance
  std::optional<std::vector<int64_t>> custom_stage_ids;  // train.dist.custom_pipeline_stage_id
  // Measured by the cluster when it forms (0: not modelled): one packet hop between actors of
  // one process, and between nodes. Every stage boundary and the last stage's return to the
  // driver cost a hop (a node-crossing one on a cluster of several nodes); the driver's feed
  // of stage 0 after sampling costs a local hop.
  // Unset: not modelled (plan), or measured (run).
  std::optional<double> local_hop_seconds;
  std::optional<double> remote_hop_seconds;
  int groups_per_replica() const { return (num_groups + dp - 1) / dp; }
};

// The request compile_plan gets for `job` on `devices` (dp x pp x tp of them, node order).
// InvalidArgument when the devices do not match the job or a profile has no positive rate.
schedule::PlanRequest plan_request(const JobShape& job,
                                   const std::vector<DeviceProfile>& devices);

// train.dist.stage_precision auto: each slot's precision chosen (schedule::choose_precisions
// over one request per precision) into job.slot_precision. Nothing to do for a job whose slots'
// precisions are given, or that has none. InvalidArgument when nothing fits.
void resolve_stage_precision(JobShape& job, const std::vector<DeviceProfile>& devices);

// schedule::compile_plan(plan_request(job, devices)): what `run` and `plan` both compile. Not
// checked against the devices' memory (check_job_plan), so that `plan` can show what does not fit.
schedule::Plan compile_job_plan(const JobShape& job,
                                const std::vector<DeviceProfile>& devices);

// schedule::validate, with a device that lacks memory named by its profile: "the plan does not
// fit: stage 1 (layers 6-11) needs N bytes (...) on device 1 (node1:cpu:0), which has M bytes
// (...)".
void check_job_plan(const schedule::Plan& plan, const std::vector<DeviceProfile>& devices,
                    int devices_per_node);

// The plan in real units: the split and each stage's devices and seconds per action, the memory
// of every stage's devices, the predicted timeline as a text chart (`width` columns), the job's
// predicted time, throughput and utilisation. What `run` prints on node 0 and `plan` prints.
void print_job_plan(std::ostream& out, const JobShape& job, const schedule::Plan& plan,
                    const std::vector<DeviceProfile>& devices, int width = 72);

// "42.0 ns", "850.0 us", "12.350 ms", "3.210 s".
std::string format_seconds(double seconds);
// "node0:cpu:0,node0:cpu:1" (the first four, then the count), as plans name a stage's devices.
std::string device_names(const std::vector<int>& devices,
                         const std::vector<DeviceProfile>& profiles);
// train.dist.stage_precision: the precision of the stage's slot ("bf16", "q4:32", ...); "" for a
// job of one precision.
std::string stage_precision_name(const JobShape& job, const schedule::StagePlan& stage);
// The tightest memory cap of a stage's devices; 0: unlimited.
double stage_cap(const schedule::Plan& plan, const schedule::StagePlan& stage);

}  // namespace libai::plan
