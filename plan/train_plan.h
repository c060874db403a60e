// The pipeline plan of a real model's training (graph mode, actors/jobs/model_train_job.h), compiled
// by schedule/ from the model's costs on measured devices: what `libai-actor train` with
// graph.enabled true splits by, and what `libai-actor plan` prints for such a config.
//
//   ModelTrainShape shape = model_train_shape(cfg, hf, devices_per_node);
//   auto devices = profile_train_devices(cfg, shape, node_rank, threads);  // on every node
//   schedule::Plan plan = compile_train_plan(shape, all_devices);          // node 0
//   check_train_plan(plan, all_devices, shape.devices_per_node);           // one clear error
//   print_train_plan(std::cout, shape, plan, all_devices);
//
// Costs (Note [Training costs of a model]):
//   time     per device and layer, the roofline of the layer's flops and weight bytes for one
//            micro-batch (train_micro_batch_size x data.seq_length tokens) on the device's
//            measured rates, calibrated by the timed forward of one middle layer on that device
//            (time_train_layer: the device's thread budget and train.cluster.device_slowdown
//            included); backward = backward_factor x forward, the factor measured on the same
//            layer (without timings: 2, or 3 under activation checkpointing).
//   memory   per layer, its parameters, the embedding's on the first stage and the head's on
//            the last: their model state (f32 weights, gradients, AdamW's two moments: 16 bytes
//            a parameter without ZeRO) by ZeRO's memory model at train.zero_optimization's
//            stage over the dp replicas (Note [ZeRO memory model] in schedule/zero_memory.h);
//            per layer and micro-batch the activations it keeps for backward
//            (models/stages/stage.h layer_costs: activation_bytes_per_token x tokens, or only
//            its input, output_bytes_per_token x tokens, under activation checkpointing), which
//            the planner multiplies by the micro-batches the schedule stashes at its peak.
//   caps     each profile's free memory divided by the devices of its node.
// DeviceProfile carries a training job's timed layer as layer_seconds (forward) and
// layer_step_seconds (backward): a training job has no decoding step.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device_profile.h"
#include "models/hf_config.h"
#include "runtime/config/config.h"
#include "runtime/device.h"
#include "schedule/plan.h"

namespace libai::plan {

// What the plan of a model's training depends on.
struct ModelTrainShape {
  models::HfConfig model;
  std::string model_name;  // where it came from (model.config or model.weights), for printing
  int num_layers = 0;      // pipeline layers
  int dp = 1, pp = 1, tp = 1, chunks = 1, devices_per_node = 1, threads = 1;
  std::string schedule = "1f1b";  // train.dist.pipeline_schedule
  int micro_batches = 1;          // per replica and step (train.num_accumulation_steps)
  int64_t micro_batch_size = 1;   // train.train_micro_batch_size
  int64_t seq_length = 1;         // data.seq_length
  bool activation_checkpoint = false;
  int zero_stage = 0;               // train.zero_optimization.stage when enabled, else 0
  std::string balance = "uniform";  // train.dist.balance
  std::optional<std::vector<int64_t>> custom_stage_ids;  // train.dist.custom_pipeline_stage_id
  std::vector<double> slowdown;  // per device (node order): train.cluster.device_slowdown
  // Measured by the cluster when it forms (0: not modelled).
  double local_hop_seconds = 0, remote_hop_seconds = 0;
  int64_t tokens() const { return micro_batch_size * seq_length; }
};

// The shape of `cfg`'s training of `model` (read from model.config or model.weights by the
// caller), its dp x pp x tp slots on nodes of `devices_per_node`. InvalidArgument naming the key
// for a bad size.
ModelTrainShape model_train_shape(const config::Config& cfg, const models::HfConfig& model,
                                  std::string model_name, int devices_per_node);

// Whether the planner has costs for the model's family (models/stages/stage.h layer_costs).
bool has_train_costs(const models::HfConfig& model);
// "gpt2, bert, ..." for messages: the registered families with a cost model.
std::string families_with_train_costs();

// One middle layer (layer 1) of the model, randomly initialised, trained on one micro-batch on
// `device` at emulated slow-down `slowdown`: the fastest forward and backward of `repetitions`
// (training mode: dropout and activation checkpointing as configured; a small layer more
// times, up to 9 runs or 0.25 s). nullopt for a model it
// does not time: fewer than 3 layers or an encoder-decoder (T5's layers differ).
struct TrainLayerTiming {
  double forward_seconds = 0, backward_seconds = 0;
};
std::optional<TrainLayerTiming> time_train_layer(const ModelTrainShape& shape, Device device,
                                                 double slowdown, int repetitions = 3);

// This node's devices: measured rates and timed layer at each device's slow-down, named
// node<k>:cpu:<d>, with train.cluster.profiles' overrides applied.
std::vector<DeviceProfile> profile_train_devices(const config::Config& cfg,
                                                       const ModelTrainShape& shape, int node_rank);
// Every device of the job as if each node were this one (cpu:0 measured once; each device's
// rates divided, its times multiplied by its slow-down): what `libai-actor plan` assumes.
std::vector<DeviceProfile> train_devices_like_this_node(const config::Config& cfg,
                                                              const ModelTrainShape& shape);

// The request compile_plan gets (see the top of the file); InvalidArgument when the devices do
// not match the shape or the balance is unknown, Unsupported for a family without costs.
schedule::PlanRequest train_plan_request(const ModelTrainShape& shape,
                                         const std::vector<DeviceProfile>& devices);
schedule::Plan compile_train_plan(const ModelTrainShape& shape,
                                  const std::vector<DeviceProfile>& devices);
// The backward factor the request used: measured (the devices' mean backward / forward of the
// timed layer) or the convention.
double train_backward_factor(const ModelTrainShape& shape,
                             const std::vector<DeviceProfile>& devices,
                             bool* measured = nullptr);

// schedule::validate, with the pipeline rank that lacks memory named by its device and its
// memory's parts.
void check_train_plan(const schedule::Plan& plan, const std::vector<DeviceProfile>& devices,
                      int devices_per_node);

// The plan in real units: per (virtual) stage its layers, devices and forward / backward
// seconds per micro-batch; per device its memory (weights, gradients, optimizer state, the
// activations the schedule stashes at its peak) against its cap; the timeline; the predicted
// step time, throughput and bubble beside the ideal formula.
void print_train_plan(std::ostream& out, const ModelTrainShape& shape, const schedule::Plan& plan,
                      const std::vector<DeviceProfile>& devices, int width = 72);
// The same as JSON (`libai-actor plan --json`).
nlohmann::json train_plan_json(const ModelTrainShape& shape, const schedule::Plan& plan,
                               const std::vector<DeviceProfile>& devices);

}  // namespace libai::plan
