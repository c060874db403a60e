#include "plan/train_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <thread>

#include "plan/run_plan.h"
#include "models/family.h"
#include "models/model.h"
#include "models/stages/stage.h"
#include "models/training_mode.h"
#include "runtime/autograd.h"
#include "runtime/device_profile.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/threads.h"

namespace libai::plan {

namespace mp = models::stages;

ModelTrainShape model_train_shape(const config::Config& cfg, const models::HfConfig& model,
                                  std::string model_name, int devices_per_node) {
  ModelTrainShape s;
  s.model = model;
  s.model_name = std::move(model_name);
  s.num_layers = mp::pipeline_num_layers(model);
  s.dp = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  s.tp = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  s.pp = cfg.get_or<int>("train.dist.pipeline_parallel_size", 1);
  s.schedule = cfg.get_or<std::string>("train.dist.pipeline_schedule", "1f1b");
  s.chunks = cfg.get_or<int>("train.dist.virtual_pipeline_size", 1);
  s.devices_per_node = devices_per_node;
  s.threads = cfg.get_or<int>("train.cluster.device_threads", 1);
  s.micro_batches = std::max(1, cfg.get_or<int>("train.num_accumulation_steps", 1));
  s.micro_batch_size = cfg.get_or<int64_t>("train.train_micro_batch_size", 1);
  const bool gpt = cfg.get_or<std::string>("data._target_", "gpt") == "gpt";
  s.seq_length = cfg.get_or<int64_t>("data.seq_length", gpt ? 1024 : 512);
  LIBAI_CHECK(s.seq_length >= 1, "data.seq_length is ", s.seq_length, "; expected at least 1");
  s.activation_checkpoint = cfg.get_or<bool>("train.activation_checkpoint.enabled", false);
  if (cfg.get_or<bool>("train.zero_optimization.enabled", false))
    s.zero_stage = cfg.get_or<int>("train.zero_optimization.stage", 1);
  s.balance = cfg.get_or<std::string>("train.dist.balance", "uniform");
  s.custom_stage_ids = cfg.get_or<std::optional<std::vector<int64_t>>>(
      "train.dist.custom_pipeline_stage_id", std::nullopt);
  const int devices = s.dp * s.pp * s.tp;
  s.slowdown = cfg.get_or<std::vector<double>>("train.cluster.device_slowdown",
                                               std::vector<double>(size_t(devices), 1.0));
  LIBAI_CHECK(int(s.slowdown.size()) == devices, "train.cluster.device_slowdown has ",
              s.slowdown.size(), " entries but the job has ", devices,
              " devices (data x pipeline x tensor parallel sizes)");
  LIBAI_CHECK(devices_per_node >= 1 && devices % devices_per_node == 0, "the job's ", devices,
              " devices do not fill nodes of ", devices_per_node, " devices");
  if (auto hop = cfg.get_or<std::optional<double>>("train.cluster.local_hop_seconds", std::nullopt))
    s.local_hop_seconds = *hop;
  if (auto hop =
          cfg.get_or<std::optional<double>>("train.cluster.remote_hop_seconds", std::nullopt))
    s.remote_hop_seconds = *hop;
  return s;
}

std::string families_with_train_costs() {
  return models::family_names([](const models::Family& f) { return f.costs.layers != nullptr; });
}

bool has_train_costs(const models::HfConfig& model) {
  try {
    mp::layer_costs(model, 1);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// Devices.

std::optional<TrainLayerTiming> time_train_layer(const ModelTrainShape& shape, Device device,
                                                 double slowdown, int repetitions) {
  const int layers = shape.num_layers;
  if (layers < 3 || mp::is_encoder_decoder(shape.model) || !has_train_costs(shape.model))
    return std::nullopt;
  const int64_t rows = shape.micro_batch_size, tokens = shape.seq_length;
  const int64_t hidden = int64_t(mp::layer_costs(shape.model, 1)[1].output_bytes_per_token) / 4;
  TrainLayerTiming timing{.forward_seconds = 1e30, .backward_seconds = 1e30};
  std::exception_ptr error;
  // On a thread of its own with `device` current, as a stage's pinned thread computes.
  std::thread measure([&] {
    try {
      set_current_cpu_device(device);
      auto part = models::create_model(shape.model, {}, models::StageSpec{1, 2, layers});
      part->set_requires_grad(true);
      const models::TrainingModeGuard mode(
          {.training = true, .seed = 1, .activation_checkpoint = shape.activation_checkpoint});
      // As time_model_layer: the caches are flushed before each run, as a stage streams its
      // layers' weights from memory one after the other.
      std::vector<char> flush(size_t(96) << 20);
      char stamp = 0;
      const EmulatedSpeed speed(slowdown);
      const Tensor grad = Tensor::ones({rows, tokens, hidden});
      // Run 0 warms up (buffers, BLAS threads). The minimum counts: other processes (the
      // nodes profile together) only add delays. A small layer gets more runs, up to 9 or
      // 0.25 s, since one of 3 short runs is easily delayed throughout.
      const auto start = std::chrono::steady_clock::now();
      auto enough = [&](int r) {
        const double spent =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return r > repetitions && (r > 9 || spent > 0.25);
      };
      for (int r = 0; !enough(r); ++r) {
        models::TensorMap in{
            {"hidden_states", Tensor::zeros({rows, tokens, hidden}).set_requires_grad(true)},
            {"attention_mask", Tensor::ones({rows, tokens}, DType::i64)}};
        std::fill(flush.begin(), flush.end(), ++stamp);
        models::TensorMap out;
        const double forward = speed.run([&] { out = part->forward(in); });
        auto it = out.find("hidden_states");
        LIBAI_CHECK(it != out.end(), "the part of layer 1 returned no hidden_states");
        std::fill(flush.begin(), flush.end(), ++stamp);
        const double backward = speed.run([&] { autograd::backward(it->second, grad); });
        if (r == 0) continue;
        timing.forward_seconds = std::min(timing.forward_seconds, forward);
        timing.backward_seconds = std::min(timing.backward_seconds, backward);
      }
    } catch (...) {
      error = std::current_exception();
    }
  });
  measure.join();
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      // The plan falls back to the rooflines: a timing that cannot run costs accuracy only.
      logger("plan")->warn("could not time a training layer of {}: {}", shape.model_name, e.what());
      return std::nullopt;
    }
  }
  return timing;
}

namespace {

DeviceProfile with_overrides(const config::Config& cfg, DeviceProfile p) {
  const config::Node* overrides = cfg.root().find_path("train.cluster.profiles");
  if (overrides && overrides->is_map())
    if (const config::Node* fields = overrides->find(p.name)) apply_profile_overrides(p, *fields);
  p.timings.clear();  // a training job times its layer in f32 only
  return p;
}

void time_on(const ModelTrainShape& shape, Device device, double slowdown, DeviceProfile& p) {
  if (auto t = time_train_layer(shape, device, slowdown)) {
    p.layer_seconds = t->forward_seconds;
    p.layer_step_seconds = t->backward_seconds;
  }
}

}  // namespace

std::vector<DeviceProfile> profile_train_devices(const config::Config& cfg,
                                                       const ModelTrainShape& shape,
                                                       int node_rank) {
  std::vector<DeviceProfile> out;
  for (int d = 0; d < shape.devices_per_node; ++d) {
    const double slowdown = shape.slowdown[size_t(node_rank * shape.devices_per_node + d)];
    DeviceProfile p = profile_cpu_device(Device::cpu(d), shape.threads, slowdown);
    p.name = str_cat("node", node_rank, ":cpu:", d);
    time_on(shape, Device::cpu(d), slowdown, p);
    out.push_back(with_overrides(cfg, p));
  }
  return out;
}

std::vector<DeviceProfile> train_devices_like_this_node(const config::Config& cfg,
                                                              const ModelTrainShape& shape) {
  DeviceProfile measured = profile_cpu_device(Device::cpu(0), shape.threads);
  time_on(shape, Device::cpu(0), 1.0, measured);
  std::vector<DeviceProfile> out;
  const int devices = shape.dp * shape.pp * shape.tp;
  for (int i = 0; i < devices; ++i) {
    DeviceProfile p = measured;
    const double s = shape.slowdown[size_t(i)];
    p.name = str_cat("node", i / shape.devices_per_node, ":cpu:", i % shape.devices_per_node);
    p.matmul_gflops /= s;
    p.memory_bandwidth_gbs /= s;
    p.layer_seconds *= s;
    p.layer_step_seconds *= s;
    p.slowdown = s;
    out.push_back(with_overrides(cfg, p));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The request.

// Note [Training costs of a model]
// A micro-batch is train_micro_batch_size sequences of data.seq_length tokens. Each layer's
// forward is its roofline on the device (flops over GFLOP/s, weight bytes over GB/s) times the
// device's calibration, timed / roofline of layer 1 (Note [Calibrated layer costs] in
// job_plan.cc): on a CPU a small layer costs several times its roofline in per-op overheads,
// and the timing includes the device's emulated slow-down. The embedding and the head get the
// same calibration. The backward is backward_factor forwards: the mean over the devices of the
// timed layer's backward / forward (its recomputation included under activation checkpointing),
// else the convention (2, or 3 with recomputation). Memory: each layer's, the embedding's and
// the head's parameters, costed by the planner's ZeRO memory model (16 bytes a parameter
// without ZeRO: f32 weight, gradient, AdamW's two moments; over dp > 1 4 more, the all-reduce
// buckets); GPT-2's tied head counts its table again on the last stage, which holds a copy
// with its own gradient and optimizer state.

double train_backward_factor(const ModelTrainShape& shape,
                             const std::vector<DeviceProfile>& devices, bool* measured) {
  const bool timed =
      !devices.empty() && std::all_of(devices.begin(), devices.end(), [](const auto& d) {
        return d.layer_seconds > 0 && d.layer_step_seconds > 0;
      });
  if (measured) *measured = timed;
  if (!timed) return shape.activation_checkpoint ? 3.0 : 2.0;
  double sum = 0;
  for (const auto& d : devices) sum += d.layer_step_seconds / d.layer_seconds;
  return sum / double(devices.size());
}

schedule::PlanRequest train_plan_request(const ModelTrainShape& shape,
                                         const std::vector<DeviceProfile>& devices) {
  const int count = shape.dp * shape.pp * shape.tp;
  LIBAI_CHECK(int(devices.size()) == count, "planning: ", devices.size(),
              " device profiles, but data ", shape.dp, " x pipeline ", shape.pp, " x tensor ",
              shape.tp, " parallelism needs ", count, " devices");
  for (const auto& d : devices)
    LIBAI_CHECK(d.matmul_gflops > 0 && d.memory_bandwidth_gbs > 0, "device ", d.name, " reports ",
                d.matmul_gflops, " GFLOP/s and ", d.memory_bandwidth_gbs,
                " GB/s; planning needs both > 0 (measured, or set in train.cluster.profiles)");
  schedule::PlanRequest r;
  r.dp = shape.dp;
  r.pp = shape.pp;
  r.tp = shape.tp;
  r.workload = schedule::Workload::train;
  r.schedule = schedule::parse_schedule(shape.schedule);
  r.num_chunks = r.schedule == schedule::PipelineSchedule::interleaved ? shape.chunks : 1;
  r.num_micro_batches = shape.micro_batches;
  r.items_per_micro_batch = double(shape.micro_batch_size);
  r.backward_factor = train_backward_factor(shape, devices);
  const int nodes = count / shape.devices_per_node;
  r.transfer_time = nodes > 1 && shape.remote_hop_seconds > 0 ? shape.remote_hop_seconds
                                                              : shape.local_hop_seconds;
  for (const auto& d : devices)
    r.memory_cap.push_back(double(d.free_memory_bytes) / shape.devices_per_node);

  const int64_t tokens = shape.tokens();
  const std::vector<mp::LayerCost> costs =
      mp::layer_costs(shape.model, tokens, DType::f32, shape.seq_length);
  LIBAI_CHECK(int(costs.size()) == shape.num_layers, shape.model_name, ": the cost model has ",
              costs.size(), " layers but the model cuts ", shape.num_layers);
  r.zero_stage = shape.zero_stage;
  const double per_param = 4;  // layer_costs counts f32 weights
  for (const auto& c : costs) {
    r.weight_bytes.push_back(0.0);  // the model state is all it holds
    r.layer_parameters.push_back(c.weight_bytes / per_param);
    r.activation_bytes.push_back(double(tokens) * (shape.activation_checkpoint
                                                       ? c.output_bytes_per_token
                                                       : c.activation_bytes_per_token));
  }
  const mp::LayerCost embedding = mp::embedding_cost(shape.model, tokens, DType::f32);
  const mp::LayerCost head = mp::head_cost(shape.model, tokens, DType::f32);
  r.embedding.parameters = embedding.weight_bytes / per_param;
  r.head.parameters = head.weight_bytes / per_param;

  auto roofline = [](double flops, double bytes, const DeviceProfile& d) {
    return schedule::layer_time_from_profile(flops, bytes, d.matmul_gflops, d.memory_bandwidth_gbs);
  };
  const bool calibrated =
      costs.size() >= 3 && std::all_of(devices.begin(), devices.end(),
                                       [](const auto& d) { return d.layer_seconds > 0; });
  for (const auto& d : devices) {
    std::vector<double> times;
    for (const auto& c : costs) times.push_back(roofline(c.flops, c.weight_bytes, d));
    const double scale = calibrated ? d.layer_seconds / times[1] : 1.0;
    for (double& t : times) t *= scale;
    r.layer_time.push_back(std::move(times));
    r.embedding.time.push_back(
        scale * roofline(embedding.flops, double(tokens) * embedding.output_bytes_per_token, d));
    r.head.time.push_back(scale * roofline(head.flops, head.weight_bytes, d));
  }

  if (shape.custom_stage_ids) {
    r.balance = schedule::Balance::custom;
    r.custom_stage_ids = *shape.custom_stage_ids;
  } else if (shape.balance == "measured") {
    r.balance = schedule::Balance::balanced;
  } else if (shape.balance == "memory") {
    r.balance = schedule::Balance::memory;
  } else {
    LIBAI_CHECK(shape.balance == "uniform", "train.dist.balance is '", shape.balance,
                "'; expected uniform, measured or memory");
    r.balance = schedule::Balance::uniform;
  }
  return r;
}

schedule::Plan compile_train_plan(const ModelTrainShape& shape,
                                  const std::vector<DeviceProfile>& devices) {
  return schedule::compile_plan(train_plan_request(shape, devices));
}

void check_train_plan(const schedule::Plan& plan, const std::vector<DeviceProfile>& devices,
                      int devices_per_node) {
  for (int k = 0; k < plan.pp && k < int(plan.rank_memory.size()); ++k) {
    const schedule::RankMemory& m = plan.rank_memory[size_t(k)];
    for (int d : plan.stages[size_t(k)].devices) {
      const double cap = size_t(d) < plan.memory_cap.size() ? plan.memory_cap[size_t(d)] : 0;
      if (cap <= 0 || m.total() <= cap) continue;
      const std::string name = size_t(d) < devices.size() ? devices[size_t(d)].name : "?";
      LIBAI_THROW(InvalidArgument, "the training plan does not fit: pipeline rank ", k, " needs ",
                  schedule::format_bytes(m.total()), " (weights, gradients and optimizer state ",
                  schedule::format_bytes(m.weight_bytes + m.model_state.total()),
                  plan.zero_stage > 0
                      ? " by " + schedule::zero_description(plan.zero_stage, plan.dp)
                      : std::string(),
                  ", stashed activations ", schedule::format_bytes(m.activation_bytes),
                  ") on device ", d, " (", name, "), which has ", schedule::format_bytes(cap),
                  " (its node's free memory / ", devices_per_node, " device(s) per node)");
    }
  }
  schedule::validate(plan);
}

}  // namespace libai::plan
